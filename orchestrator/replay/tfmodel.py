"""What Terraform would hold and say in a replay: states, saved plans, outputs, listings, refusals.

The pieces :class:`~orchestrator.replay.engine.ModelEngine` is made of, as data and pure
functions over the model cloud (:mod:`.cloud`), so that every document has one place: the
state of one working directory (its instances as the ``instances`` output shows them, with a
serial), a saved plan (the serial it was made against and its changes), the plan's diff of
the desired variables against the state and the cloud, the ``tagged`` listing the loss
observer reads, and the error diagnostics a refused create gets, worded as the module's cloud
words them so that the real classification (:mod:`orchestrator.ops.refusal`) reads capacity or
quota. No I/O except reading a working directory's module files once to know its module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from orchestrator.clients.terraform.messages import Action, Diagnostic, ResourceChange
from orchestrator.model import tags as owner
from orchestrator.model.modules import MODULES, FailureClass, ProviderModule
from orchestrator.model.offerings import offering_name
from orchestrator.replay.cloud import RUNNING, STOPPED, ModelCloud, ModelInstance
from orchestrator.replay.model import QUOTA, RefusalWindow

# The module of a working directory whose files name none the registry knows (a test's bare
# directory): the simulated cloud's, whose codes are EC2's.
DEFAULT_MODULE: Final = "xcesim"
# How long the cloud keeps listing an ended instance (the xcesim module's ``recently_terminated``).
LISTED_AFTER_END: Final = 3600.0
# The cloud's own words per refusal class, where its module's rules name them (the simulated
# cloud's, ``orchestrator/sim/cloud/faults.py``); otherwise the module's first code of the class.
PREFERRED_CODES: Final = {FailureClass.CAPACITY: "InsufficientCapacity", FailureClass.QUOTA: "InstanceLimitExceeded"}


@dataclass
class WorkdirState:
    """The Terraform state of one working directory: instance key → its ``instances`` output
    entry (id, name, address, launch_time, tags), the power state the configuration asked for
    (absent: none asked), and a serial moved by every apply that changed something."""

    serial: int = 0
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    power: dict[str, str] = field(default_factory=dict)

    def drop(self, key: str) -> None:
        self.instances.pop(key, None)
        self.power.pop(key, None)


@dataclass(frozen=True)
class SavedPlan:
    """A plan saved with ``-out``: the variables it was made with, the serial of the state it was
    made against (an apply of it after the serial moved is stale), its changes and drift."""

    serial: int
    variables: Mapping[str, Any]
    changes: tuple[ResourceChange, ...]
    drift: tuple[ResourceChange, ...]
    refresh_only: bool


@dataclass(frozen=True)
class Site:
    """What one working directory is: its module's registry entry, its provider and cluster
    (from ``common_tags``) and whether it lists the cloud (``settings.list_tagged``)."""

    entry: ProviderModule
    provider: str
    cluster: str
    lists: bool

    def address(self, key: str) -> str:
        return self.entry.instance_address(key)

    def change(self, key: str, action: Action) -> ResourceChange:
        return ResourceChange(self.address(key), "module.instances", self.entry.instance_types[0], "this", key, action)


def module_of(workdir: Path) -> ProviderModule:
    """The registry entry of the module copied into ``workdir/module`` (by its instance resource
    type, as Terraform reads the configuration); :data:`DEFAULT_MODULE`'s when none matches."""
    text = ""
    for file in sorted((workdir / "module").glob("*.tf")):
        text += file.read_text(encoding="utf-8", errors="replace")
    for entry in MODULES.values():
        if any(f'resource "{kind}"' in text for kind in entry.instance_types):
            return entry
    return MODULES[DEFAULT_MODULE]


def site_of(entry: ProviderModule, variables: Mapping[str, Any]) -> Site:
    """The site of a working directory whose variables are ``variables``."""
    common = entry.labels.from_labels(dict(variables.get("common_tags") or {}))
    settings = variables.get("settings") or {}
    return Site(
        entry, common.get(owner.PROVIDER, ""), common.get(owner.CLUSTER, ""), bool(settings.get("list_tagged", True))
    )


def cloud_tags(variables: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, str]:
    """An instance's tags as the cloud holds them: the common tags, then its own (the module's merge)."""
    return {**(variables.get("common_tags") or {}), **(spec.get("tags") or {})}


def spec_offering(spec: Mapping[str, Any]) -> str:
    """The offering an entry is rendered on: ``flavor[@zone][@subnet]``."""
    return offering_name(str(spec.get("flavor", "")), spec.get("zone"), spec.get("subnet"))


def live_twin(cloud: ModelCloud, key: str, state: WorkdirState) -> ModelInstance | None:
    """The cloud's live instance of a held key (None: the cloud ended it, or holds another)."""
    inst = cloud.instances.get(key)
    held = state.instances.get(key)
    if inst is None or not inst.live or held is None or held.get("id") != inst.instance_id:
        return None
    return inst


def diff(
    site: Site, cloud: ModelCloud, state: WorkdirState, variables: Mapping[str, Any], destroy: bool
) -> tuple[tuple[ResourceChange, ...], tuple[ResourceChange, ...]]:
    """(changes, drift) of a plan: the refresh finds held instances the cloud ended (drift
    ``delete``); then desired keys not present are created, present keys not desired deleted,
    and present keys whose tags or asked power differ updated in place. O(instances)."""
    present = {k for k in state.instances if live_twin(cloud, k, state) is not None}
    drift = tuple(site.change(k, "delete") for k in sorted(set(state.instances) - present))
    wanted: Mapping[str, Any] = {} if destroy else (variables.get("instances") or {})
    actions: list[tuple[str, Action]] = [(k, "create") for k in wanted if k not in present]
    actions += [(k, "delete") for k in present if k not in wanted]
    for key in present:
        spec = wanted.get(key)
        if spec is None:
            continue
        power = spec.get("power_state")
        held = state.instances[key]
        if held.get("tags") != cloud_tags(variables, spec) or (power is not None and state.power.get(key) != power):
            actions.append((key, "update"))
    return tuple(site.change(k, a) for k, a in sorted(actions)), drift


def rfc3339(when: float) -> tuple[str, float]:
    """``when`` as the cloud's launch time text (microseconds), and the Unix seconds that text
    reads back as (what the cost ledger will take: ``model.costs.launch_time_of``)."""
    stamp = datetime.fromtimestamp(when, UTC)
    text = stamp.isoformat().replace("+00:00", "Z")
    return text, datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def fake_address(instance_id: str) -> str:
    """A deterministic private address for the instance ``instance_id`` (``m-<number>``; never
    reached: the replay's hosts are modelled, nothing connects to them)."""
    digits = instance_id.rpartition("-")[2]
    number = int(digits) if digits.isdigit() else 0
    return f"10.{64 + (number // 62_500) % 64}.{(number // 250) % 250}.{number % 250 + 1}"


def output_entry(inst: ModelInstance, labels_tags: Mapping[str, str], address: str) -> dict[str, Any]:
    """The ``instances`` output entry of ``inst`` (the module's shape)."""
    return {
        "id": inst.instance_id,
        "name": inst.name,
        "address": address,
        "launch_time": rfc3339(inst.launched)[0],
        "tags": dict(labels_tags),
    }


def power_of(inst: ModelInstance) -> str:
    return STOPPED if inst.state == STOPPED else RUNNING


def listing(site: Site, cloud: ModelCloud, now: float) -> dict[str, Any]:
    """The ``tagged`` output: every instance of this provider's cloud carrying the cluster's tag,
    live or ended within :data:`LISTED_AFTER_END`, keyed by id, with state and reason."""
    tagged: dict[str, Any] = {}
    labels = site.entry.labels
    for inst in cloud.instances.values():
        if inst.provider != site.provider or inst.tags.get(owner.CLUSTER) != site.cluster:
            continue
        if inst.ended is not None and inst.ended < now - LISTED_AFTER_END:
            continue
        tagged[inst.instance_id] = {
            "id": inst.instance_id,
            "name": inst.name,
            "address": "",
            "launch_time": rfc3339(inst.launched)[0],
            "state": inst.state,
            "state_reason": inst.reason,
            "tags": dict(inst.tags) if labels.identity else labels.to_labels(inst.tags),
        }
    return tagged


def refusal_code(entry: ProviderModule, kind: FailureClass) -> str:
    """The error code the module's cloud refuses with for ``kind`` (:data:`PREFERRED_CODES` first)."""
    codes = [code for rule in entry.error_rules if rule.kind == kind for code in rule.codes]
    preferred = PREFERRED_CODES.get(kind)
    if preferred in codes or not codes:
        return preferred or kind.value
    return codes[0]


def refusal_diagnostic(site: Site, key: str, spec: Mapping[str, Any], window: RefusalWindow) -> Diagnostic:
    """The error diagnostic a create of ``key`` refused by ``window`` gets, tied to its resource
    (``address``), worded as the cloud's own one-line error as the xcesim provider passes it on."""
    if window.scope == QUOTA:
        code = refusal_code(site.entry, FailureClass.QUOTA)
        text = f"{code}: the account may run no more instances (modelled quota, until {window.end:.0f})"
    else:
        code = refusal_code(site.entry, FailureClass.CAPACITY)
        zone = spec.get("zone")
        where = f"flavor {spec.get('flavor', '')}" + (f" in zone {zone}" if zone else "")
        text = f"{code}: {where} has no capacity (modelled, offering {window.placement}, until {window.end:.0f})"
    return Diagnostic("error", text, "while creating instance", address=site.address(key))


def show_state_document(site: Site | None, state: WorkdirState) -> dict[str, Any]:
    """``terraform show -json`` of a state: the outputs, and one resource per instance key."""
    kind = site.entry.instance_types[0] if site is not None else ""
    resources = [
        {
            "address": site.address(k) if site is not None else k,
            "mode": "managed",
            "type": kind,
            "name": "this",
            "index": k,
            "values": dict(v),
        }
        for k, v in state.instances.items()
    ]
    return {
        "format_version": "1.0",
        "values": {
            "outputs": {"instances": {"value": outputs(state)["instances"]}},
            "root_module": {"child_modules": [{"address": "module.instances", "resources": resources}]},
        },
    }


def outputs(state: WorkdirState) -> dict[str, Any]:
    """The root outputs of a state (copies: a caller may change what it is given)."""
    return {"instances": {k: {**v, "tags": dict(v["tags"])} for k, v in state.instances.items()}, "images": {}}
