"""A fake Terraform engine for unit tests (the ``Engine`` protocol over a JSON "state" file) and a site.

It keeps what the verbs' decisions depend on and nothing else: a state (instance keys of the
working directory, with a serial), plans that diff the candidate variables against that state
(saved as JSON with the serial they were made against), applies that refuse a saved plan whose
serial moved (``StaleState``, as Terraform does), and the ``instances`` output. Every call is
recorded in ``calls`` so tests can assert what was (not) asked of Terraform.

A cloud behind the state is modelled only as far as host loss needs it: :meth:`FakeEngine.vanish`
deletes an instance behind Terraform's back, so every plan's refresh reports it as drift
``delete`` (a normal plan also plans its re-create while it is desired), as Terraform does; the
next apply drops it from the state. A key whose desired ``tags`` or ``power_state`` differ from
the state's is planned as an in-place ``update`` (a warm-pool start). ``listed`` is the tagged
listing a ``show -json`` of a plan carries (none by default: ``tagged_supported`` false). Baked
images (the ``images`` variable) are planned, applied and output beside the instances; the
images of a state are its ``tagged_images`` listing.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.clients.controller.types import DemandSnapshot, HostInfo, TemplateDemand
from orchestrator.clients.terraform.messages import (
    Action,
    ApplyEventFn,
    ApplyHook,
    ApplyResult,
    Diagnostic,
    PlanResult,
    ResourceChange,
    Summary,
)
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import FinalError, LeaseLost, StaleState, TerraformError
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.executor import Executor, OpParts, Wired
from orchestrator.workspace.cloudview import Drift, drift_from_stream

ROOT = Path(__file__).resolve().parents[1]  # the toolkit root: real templates and xcesim module
STATE = "fake.tfstate.json"
ADDR = 'module.instances.xcesim_instance.this["{key}"]'
IMAGE_ADDR = 'module.instances.xcesim_image.this["{key}"]'


class FakeEngine:
    """Implements ``orchestrator.clients.terraform.engine.Engine`` without Terraform."""

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.calls: list[tuple[str, Path]] = []
        # The ``should_stop`` of every apply, in order (None when the caller gave none).
        self.should_stop: list[Callable[[], bool] | None] = []
        # Per plan: the working directory and the keys it would create (shards: only their own).
        self.planned_creates: list[tuple[Path, list[str]]] = []
        # Per plan: the root variable ``fence`` it was given (None when absent).
        self.plan_fences: list[str | None] = []
        # Per plan: every variable it was given (the preview and the op plan the same ones).
        self.plan_variables: list[dict[str, Any]] = []
        # Working directories whose next apply fails (once each), as a cloud error would.
        self.fail_apply: set[Path] = set()
        # While set: every apply that would create an instance fails with this cloud error
        # (a refusal that lasts, such as a quota reached).
        self.refuse_creates: str | None = None
        # Called inside every apply while it counts as running (shard tests synchronise on it).
        self.during_apply: Callable[[Path], None] | None = None
        self.in_flight = 0
        self.peak_in_flight = 0  # the most applies that ever ran at the same time
        self._count = threading.Lock()
        # The tagged listing: cloud id → (state, state_reason); empty = the module cannot list.
        self.listed: dict[str, tuple[str, str]] = {}
        # The address the cloud reports for an instance key ("" = not yet addressed).
        self.address_of: Callable[[str], str] = lambda key: ""
        # Tags of listed objects (cloud id → tags; none unless set).
        self.listed_tags: dict[str, dict[str, str]] = {}

    # --- state of one working directory -------------------------------------------------

    @staticmethod
    def state(workdir: Path) -> dict[str, Any]:
        """``{"serial": n, "instances": {key: entry}}`` of ``workdir`` (empty when never applied)."""
        try:
            return dict(json.loads((workdir / STATE).read_text()))
        except FileNotFoundError:
            return {"serial": 0, "instances": {}}

    @classmethod
    def _write_state(cls, workdir: Path, instances: dict[str, Any], images: dict[str, Any] | None = None) -> None:
        before = cls.state(workdir)
        kept = before.get("images", {}) if images is None else images
        (workdir / STATE).write_text(
            json.dumps({"serial": before["serial"] + 1, "instances": instances, "images": kept})
        )

    @classmethod
    def vanish(cls, workdir: Path, key: str, back: bool = False) -> None:
        """The cloud deletes instance ``key`` behind Terraform's back (``back``: it is seen again).

        The state keeps it (and its serial: a refresh writes nothing) until the next apply.
        """
        state = cls.state(workdir)
        gone = set(state.get("gone", ())) - {key} if back else {*state.get("gone", ()), key}
        (workdir / STATE).write_text(json.dumps({**state, "gone": sorted(gone)}))

    @classmethod
    def present(cls, workdir: Path) -> set[str]:
        """The keys of the state that the cloud still has (what a refresh keeps)."""
        state = cls.state(workdir)
        return set(state["instances"]) - set(state.get("gone", ()))

    # --- the Engine protocol ------------------------------------------------------------

    def init(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        self.calls.append(("init", workdir))
        if not (workdir / "main.tf").is_file():
            raise TerraformError(f"{workdir}: no configuration")
        if self.fail_init:
            raise TerraformError("Error: Failed to query available provider packages")
        (workdir / ".terraform").mkdir(exist_ok=True)
        (workdir / ".terraform.lock.hcl").write_text("# fake\n")

    def migrate_state(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        self.calls.append(("migrate-state", workdir))

    def state_pull(self, workdir: Path) -> dict[str, Any]:
        self.calls.append(("state pull", workdir))
        state = self.state(workdir)
        return {"version": 4, "serial": state["serial"], "lineage": "fake", "resources": []}

    def state_push(self, workdir: Path, state: Mapping[str, Any]) -> None:
        self.calls.append(("state push", workdir))

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        self.calls.append(("plan", workdir))
        variables: dict[str, Any] = {}
        for var_file in var_files:
            variables.update(json.loads(Path(workdir, var_file).read_text()))
        self.plan_fences.append(variables.get("fence"))
        self.plan_variables.append(variables)
        current = self.state(workdir)
        present = self.present(workdir)
        wanted = {} if destroy else dict(variables.get("instances") or {})
        held = current["instances"]
        changes = tuple(
            ResourceChange(ADDR.format(key=k), "module.instances", "xcesim_instance", "this", k, action)
            for k, action in sorted(
                [(k, "create") for k in wanted if k not in present]
                + [(k, "delete") for k in present if k not in wanted]
                + [(k, "update") for k in wanted if k in present and _updated(held[k], wanted[k])]
            )
        )
        wanted_images = {} if destroy else dict(variables.get("images") or {})
        held_images = current.get("images", {})
        changes += tuple(
            ResourceChange(IMAGE_ADDR.format(key=k), "module.instances", "xcesim_image", "this", k, action)
            for k, action in sorted(
                [(k, "create") for k in wanted_images if k not in held_images]
                + [(k, "delete") for k in held_images if k not in wanted_images]
            )
        )
        drift = tuple(
            ResourceChange(ADDR.format(key=k), "module.instances", "xcesim_instance", "this", k, "delete")
            for k in sorted(set(current["instances"]) - present)
        )
        if out is not None:
            Path(workdir, out).write_text(
                json.dumps({"serial": current["serial"], "variables": variables, "changes": [c.key for c in changes]})
            )
        adds = sum(c.action == "create" for c in changes)
        updates = sum(c.action == "update" for c in changes)
        if not refresh_only:
            self.planned_creates.append((workdir, [str(c.key) for c in changes if c.action == "create"]))
        return PlanResult(
            changes=changes,
            drift=drift,
            diagnostics=(),
            summary=Summary(add=adds, change=updates, remove=len(changes) - adds - updates),
            has_changes=bool(changes or drift),
            plan_file=str(out) if out is not None else None,
        )

    def apply(
        self,
        workdir: Path,
        plan_file: Path | None = None,
        var_files: Sequence[Path] = (),
        auto_approve: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        self.calls.append(("apply", workdir))
        self.should_stop.append(should_stop)
        if plan_file is None:
            raise TerraformError("the fake engine applies saved plans only")
        with self._count:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.during_apply is not None:
                self.during_apply(workdir)
            return self._apply(workdir, plan_file, should_stop, on_event)
        finally:
            with self._count:
                self.in_flight -= 1

    def _apply(
        self,
        workdir: Path,
        plan_file: Path,
        should_stop: Callable[[], bool] | None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        if workdir in self.fail_apply:
            self.fail_apply.discard(workdir)
            raise TerraformError("Error: creating instance: the cloud refused (injected)")
        if should_stop is not None and should_stop():
            # Stopped before its first cloud call: the state is unchanged, as Terraform leaves it.
            return ApplyResult(changes=(), failed=(), diagnostics=(), summary=Summary(), interrupted=True)
        saved = json.loads(Path(workdir, plan_file).read_text())
        new = set(saved["variables"].get("instances") or {}) - set(self.state(workdir)["instances"])
        if self.refuse_creates is not None and new:
            raise TerraformError(f"Error: creating instance: {self.refuse_creates}")
        if saved["serial"] != self.state(workdir)["serial"]:
            raise StaleState("saved plan is stale: the state changed since the plan was made")
        instances = {
            key: {"id": f"i-{key}", "name": spec["name"], "address": self.address_of(key), "tags": spec["tags"]}
            for key, spec in (saved["variables"].get("instances") or {}).items()
        }
        for key, spec in (saved["variables"].get("instances") or {}).items():
            if spec.get("power_state") is not None:
                instances[key]["power_state"] = spec["power_state"]
        before = self.state(workdir)["instances"]
        held_images = self.state(workdir).get("images", {})
        images = {
            key: held_images.get(key)
            or {
                "id": f"img-{key}",
                "name": spec["name"],
                "instance_id": spec["instance_id"],
                "created_at": "",
                "tags": spec["tags"],
            }
            for key, spec in (saved["variables"].get("images") or {}).items()
        }
        self._write_state(workdir, instances, images)
        if on_event is not None:  # as Terraform reports each instance's change while it applies
            changes: list[tuple[str, Action]] = [(k, "create") for k in instances if k not in before]
            changes += [(k, "delete") for k in before if k not in instances]
            for key, action in sorted(changes):
                addr = ADDR.format(key=key)
                change = ResourceChange(addr, "module.instances", "xcesim_instance", "this", key, action)
                on_event(ApplyHook("start", change))
                on_event(ApplyHook("complete", change))
        # As Terraform's own stream ends: the root outputs after the apply.
        outputs = {"instances": instances, "images": images}
        return ApplyResult(changes=(), failed=(), diagnostics=(), summary=Summary(), outputs=outputs)

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        self.calls.append(("show_plan", workdir))
        saved = json.loads(Path(workdir, plan_file).read_text())
        tagged = {
            object_id: {
                "id": object_id,
                "name": "",
                "address": "",
                "tags": self.listed_tags.get(object_id, {}),
                "state": state,
                "state_reason": why,
            }
            for object_id, (state, why) in self.listed.items()
        }
        images = {
            image["id"]: {**image, "state": "available"} for image in self.state(workdir).get("images", {}).values()
        }
        return {
            "variables": {name: {"value": value} for name, value in saved["variables"].items()},
            "planned_values": {
                "outputs": {
                    "tagged_supported": {"value": bool(self.listed)},
                    "tagged": {"value": tagged},
                    "tagged_images": {"value": images},
                }
            },
            "resource_changes": [
                {"address": ADDR.format(key=key), "index": key, "change": {"actions": ["create"]}}
                for key in saved["changes"]
                if key not in self.state(workdir)["instances"]
            ],
        }

    def show_state(self, workdir: Path) -> dict[str, Any]:
        return {"values": {"outputs": {"instances": {"value": self.state(workdir)["instances"]}}}}

    def output(self, workdir: Path) -> dict[str, Any]:
        self.calls.append(("output", workdir))
        state = self.state(workdir)
        return {"instances": state["instances"], "images": state.get("images", {})}

    def fmt_check(self, path: Path) -> list[str]:
        return []

    def validate(self, workdir: Path) -> list[Diagnostic]:
        return []


def _updated(held: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a desired entry changes a held instance in place (its tags or its power)."""
    power = wanted.get("power_state")
    return held.get("tags") != wanted.get("tags") or (power is not None and held.get("power_state") != power)


SITE = """
cluster: {cluster}
state_dir: {state}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim, max_instances: 10}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}
  gpu:
    providers:
      sim: {{flavor: g4.xlarge, image: debian-12, cost_per_hour: 3.0}}
"""


def site_config(
    tmp_path: Path, cluster: str = "unit", shard_size: int | None = None, parallel_states: int | None = None
) -> LoadedConfig:
    """The test site, its state under ``tmp_path/state``; optionally small shards (room for 30)."""
    text = SITE.format(cluster=cluster, state=tmp_path / "state")
    if shard_size is not None:
        text = text.replace("max_instances: 10}", f"max_instances: 30, shard_size: {shard_size}}}")
    if parallel_states is not None:
        text += f"terraform: {{parallel_states: {parallel_states}}}\n"
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


class FakeFence:
    """A lease for unit tests: valid until ``revoke``; ``valid_calls`` counts the polls."""

    def __init__(self, epoch: tuple[int, int] = (3, 7)) -> None:
        self.epoch = Epoch(*epoch)
        self.revoked = False

    def gate(self, provider: str) -> Epoch:
        if self.revoked:
            raise LeaseLost(f"lease for provider {provider!r} was revoked")
        return self.epoch

    def valid(self, provider: str) -> bool:
        return not self.revoked


class MemoryFacts:
    """Facts kept in a list, idempotent per kind, op and key like the controller."""

    def __init__(self) -> None:
        self.committed: list[Fact] = []

    def commit(self, fact: Fact) -> None:
        if any((f.kind, f.op_id, f.instance_key) == (fact.kind, fact.op_id, fact.instance_key) for f in self.committed):
            return
        self.committed.append(dataclasses.replace(fact, fact_id=len(self.committed) + 1))

    def commit_many(self, facts: Sequence[Fact]) -> None:
        for fact in facts:
            self.commit(fact)

    def facts(self, provider: str) -> list[Fact]:
        return [f for f in self.committed if f.provider == provider]

    def kinds(self) -> list[str]:
        return [str(f.kind) for f in self.committed]


class StampedFacts(MemoryFacts):
    """Facts committed at the clock's time, as the controller stamps them."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock

    def commit(self, fact: Fact) -> None:
        super().commit(dataclasses.replace(fact, committed=self.clock()))


class CrashOn(MemoryFacts):
    """A controller that "crashes" the orchestrator at the first commit of one kind of fact."""

    def __init__(self, kind: FactKind) -> None:
        super().__init__()
        self.kind = kind

    def commit(self, fact: Fact) -> None:
        if fact.kind == self.kind:
            self.kind = FactKind.ORPHAN_ADOPTED  # only once
            raise KeyboardInterrupt
        super().commit(fact)


class FakeHosts:
    """The controller's hosts for unit tests: ``states`` by instance key; records closes and decommissions."""

    def __init__(self, states: dict[str, str] | None = None) -> None:
        self.states = dict(states or {})
        self.closed: list[str] = []
        self.decommissioned: list[str] = []
        self.forced: list[str] = []
        # Called on every ``hosts()`` read: lets a test finish a host's work while a drain waits.
        self.on_read: Callable[[FakeHosts], None] | None = None

    def hosts(self, provider: str) -> list[HostInfo]:
        if self.on_read is not None:
            self.on_read(self)
        return [
            HostInfo(host_name=f"h-{k}", state=s, instance_key=k, instance_id=f"i-{k}", provider=provider)
            for k, s in self.states.items()
        ]

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        self.closed.append(host.instance_key)
        if self.states.get(host.instance_key) == "busy":
            self.states[host.instance_key] = "closing"
        return "closing" if self.states.get(host.instance_key) == "closing" else "closed"

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        # Like the controller: a host that runs work is decommissioned only when forced.
        if self.states.get(host.instance_key) in ("busy", "closing") and not force:
            raise FinalError(f"controller refused hostDecommission: host {host.host_name!r} is running work")
        self.decommissioned.append(host.instance_key)
        if force:
            self.forced.append(host.instance_key)


class NoLosses:
    """A host-loss observer that never judges an instance lost (its plans' drift is still reported)."""

    def observe(self) -> list[Any]:
        return []

    def record(self, plan: PlanResult) -> Drift:
        return drift_from_stream(plan, dict)


def unit_parts(loaded: LoadedConfig, engine: FakeEngine, **kwargs: Any) -> OpParts:
    """The parts of an executor over the fake engine with an in-memory controller; no instance is ever lost."""
    kwargs.setdefault("fence", FakeFence())
    kwargs.setdefault("facts", MemoryFacts())
    kwargs.setdefault("hosts", FakeHosts())
    kwargs.setdefault("losses", lambda _engine, _path: NoLosses())
    return OpParts(loaded.config, ROOT, engine, kwargs.pop("fence"), kwargs.pop("facts"), kwargs.pop("hosts"), **kwargs)


def unit_ops(loaded: LoadedConfig, engine: FakeEngine, **kwargs: Any) -> Wired:
    """An executor of :func:`unit_parts`, with its parts."""
    return Wired.of(unit_parts(loaded, engine, **kwargs))


def unit_executor(loaded: LoadedConfig, engine: FakeEngine, **kwargs: Any) -> Executor:
    """An executor of :func:`unit_parts` (a test that needs its parts builds them: :func:`unit_ops`)."""
    return Executor(unit_parts(loaded, engine, **kwargs))


class FakeView:
    """The controller as a pass reads it: a snapshot, the executor's facts and hosts."""

    def __init__(self, facts: MemoryFacts, hosts: FakeHosts) -> None:
        self.facts_log, self.host_log = facts, hosts
        self.snapshot: DemandSnapshot | None = None
        self.up = True
        self.hosts_error: Exception | None = None

    def want(self, **wanted: int) -> None:
        seq = self.snapshot.seq + 1 if self.snapshot else 1
        self.snapshot = DemandSnapshot(seq, 1, 0.0, tuple(TemplateDemand(t, n) for t, n in wanted.items()))

    def demand(self) -> DemandSnapshot | None:
        """The snapshot with ``in_flight`` as the controller counts it: expected hosts not gone."""
        if self.snapshot is None:
            return None
        facts = self.facts_log.committed
        gone = {f.instance_key for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
        expected = [f for f in facts if f.kind == FactKind.EXPECTED_HOST and f.instance_key not in gone]
        templates = tuple(
            TemplateDemand(t.template, t.wanted, in_flight=sum(f.template == t.template for f in expected))
            for t in self.snapshot.templates
        )
        return DemandSnapshot(self.snapshot.seq, self.snapshot.term, self.snapshot.time, templates)

    def hosts(self) -> Sequence[HostInfo]:
        if self.hosts_error is not None:
            raise self.hosts_error
        return self.host_log.hosts("sim")

    def facts(self, provider: str) -> list[Fact]:
        return self.facts_log.facts(provider)

    def connected(self) -> bool:
        return self.up
