"""The model Terraform engine of a replay: the ``Engine`` protocol over the model cloud.

The real :class:`~orchestrator.ops.executor.Executor` drives it exactly as it drives Terraform
(plan with ``-out``, check, apply the saved plan, read the outputs, read the cloud's views for
host loss), and it answers as Terraform over the xcesim module would, without a process, a
file of its own or a wait:

* each working directory has a state in memory (its instances as the ``instances`` output
  shows them, with a serial); a saved plan whose serial moved is refused (``StaleState``);
* a plan's refresh sees the model cloud: a held instance the cloud ended (a spot reclaim) is
  drift ``delete``; desired keys not present are created, present keys not desired deleted,
  a changed power state or tags updated in place (the warm pool);
* ``show -json`` of a plan carries the module's ``tagged`` listing (state and ``state_reason``
  of every instance of the cluster), so the real loss observer judges a reclaim lost at once;
* an apply creates at the virtual clock's time after one drawn launch latency (the clock moves
  by ``model.latencies.draw_launch`` once per apply that creates: the world spends that long),
  deletes and power changes take no modelled time; a create whose offering a refusal window of
  the model covers is not made and fails as Terraform reports the cloud's refusal (an error
  diagnostic tied to the key, worded with the module's capacity or quota code), while the
  other keys of the same apply are made and kept in the state (Terraform's partial success);
* each instance's ``launch_time`` reads back as exactly its ``ModelInstance.launched``, so the
  cost ledger's start of every replayed instance is the model cloud's.

Saved plans are kept in memory by (working directory, plan file); nothing is written.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from orchestrator.clients.terraform.messages import (
    ApplyEventFn,
    ApplyFailed,
    ApplyHook,
    ApplyResult,
    Diagnostic,
    PlanResult,
    ResourceChange,
    Summary,
)
from orchestrator.errors import StaleState, TerraformError
from orchestrator.model.modules import ProviderModule
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import RUNNING, STOPPED, ModelCloud
from orchestrator.replay.model import RefusalWindow, WorldModel
from orchestrator.replay.tfmodel import (
    SavedPlan,
    Site,
    WorkdirState,
    cloud_tags,
    diff,
    fake_address,
    listing,
    module_of,
    output_entry,
    outputs,
    power_of,
    refusal_diagnostic,
    rfc3339,
    show_state_document,
    site_of,
    spec_offering,
)

if TYPE_CHECKING:
    from orchestrator.clients.terraform.engine import Engine

# Saved plans kept per working directory (a read's plan is shown and dropped; an op's applied):
# the oldest beyond this are forgotten, as a plan file removed.
MAX_SAVED_PLANS: Final = 16


class ModelEngine:
    """Implements ``orchestrator.clients.terraform.engine.Engine`` over a :class:`ModelCloud`."""

    name = "model (replay)"

    def __init__(self, cloud: ModelCloud, model: WorldModel, clock: VirtualClock, rng: random.Random) -> None:
        self.cloud = cloud
        self.model = model
        self.clock = clock
        self.rng = rng
        self.states: dict[Path, WorkdirState] = {}
        self.plans: dict[Path, dict[Path, SavedPlan]] = {}
        self.modules: dict[Path, ProviderModule] = {}
        self.sites: dict[Path, Site] = {}

    # --- the working directory's model --------------------------------------------------

    def state(self, workdir: Path) -> WorkdirState:
        """The state of ``workdir`` (empty until its first apply)."""
        return self.states.setdefault(Path(workdir), WorkdirState())

    def _site(self, workdir: Path, variables: Mapping[str, Any]) -> Site:
        wd = Path(workdir)
        entry = self.modules.get(wd)
        if entry is None:
            entry = self.modules[wd] = module_of(wd)
        site = site_of(entry, variables)
        self.sites[wd] = site
        return site

    @staticmethod
    def _variables(workdir: Path, var_files: Sequence[Path]) -> dict[str, Any]:
        variables: dict[str, Any] = {}
        for var_file in var_files:
            try:
                value = json.loads(Path(workdir, var_file).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise TerraformError(f"Error: Failed to read variables file {var_file}: {exc}") from None
            if not isinstance(value, dict):
                raise TerraformError(f"Error: variables file {var_file}: not a JSON object")
            variables.update(value)
        return variables

    def _saved(self, workdir: Path, plan_file: Path) -> SavedPlan:
        saved = self.plans.get(Path(workdir), {}).get(Path(workdir, plan_file))
        if saved is None:
            raise TerraformError(f"Error: Failed to load {plan_file} as a plan file: no such saved plan")
        return saved

    # --- the Engine protocol ------------------------------------------------------------

    def init(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """No providers to install: marks the directory initialised (``.terraform``), as Terraform would."""
        Path(workdir, ".terraform").mkdir(exist_ok=True)

    def migrate_state(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """One backend only (memory): nothing moves."""

    def state_pull(self, workdir: Path) -> dict[str, Any]:
        """The state document (Terraform's layout: one resource, an instance per key); {} when empty."""
        state = self.state(workdir)
        site = self.sites.get(Path(workdir))
        if not state.instances or site is None:
            return {}
        resource = {
            "module": "module.instances",
            "mode": "managed",
            "type": site.entry.instance_types[0],
            "name": "this",
            "instances": [{"index_key": k, "attributes": dict(v)} for k, v in state.instances.items()],
        }
        return {"version": 4, "serial": state.serial, "lineage": "replay", "resources": [resource]}

    def state_push(self, workdir: Path, state: Mapping[str, Any]) -> None:
        """Refused: a replay's states are the model's, never replaced from outside."""
        raise TerraformError("Error: the replay's model engine takes no pushed state")

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        """Refresh against the model cloud, then diff the variables against the state (see the module)."""
        wd = Path(workdir)
        variables = self._variables(wd, var_files)
        site = self._site(wd, variables)
        state = self.state(wd)
        changes, drift = diff(site, self.cloud, state, variables, destroy)
        if refresh_only:
            changes = ()
        if out is not None:
            saved = self.plans.setdefault(wd, {})
            saved[Path(wd, out)] = SavedPlan(state.serial, variables, changes, drift, refresh_only)
            while len(saved) > MAX_SAVED_PLANS:
                del saved[next(iter(saved))]
        return PlanResult(
            changes=changes,
            drift=drift,
            diagnostics=(),
            summary=_summary(changes),
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
        """Apply a saved plan (or plan and apply ``var_files``) to the model cloud (see the module)."""
        wd = Path(workdir)
        if plan_file is None:
            probe = Path(".model-apply.tfplan")
            self.plan(wd, var_files, out=probe)
            plan_file = probe
        saved = self._saved(wd, plan_file)
        self.plans[wd].pop(Path(wd, plan_file), None)
        if should_stop is not None and should_stop():
            # Stopped before its first cloud call: the state is unchanged, as Terraform leaves it.
            return ApplyResult(changes=(), failed=(), diagnostics=(), summary=Summary(), interrupted=True)
        state = self.state(wd)
        if saved.serial != state.serial:
            raise StaleState("saved plan is stale: the state changed since the plan was made")
        site = self._site(wd, saved.variables)
        for change in saved.drift:  # the refresh's findings are written with the apply
            state.drop(str(change.key))
        done, failed, diags = self._changes(site, state, saved)
        if saved.drift or done:
            state.serial += 1
        for hook in _hooks(done, failed, diags):
            if on_event is not None:
                on_event(hook)
        summary = _summary(done)
        if diags:
            result = ApplyResult(done, failed, diags, summary)
            raise ApplyFailed("\n".join(str(d) for d in diags), result)
        return ApplyResult(done, (), (), summary, outputs=outputs(state))

    def _changes(
        self, site: Site, state: WorkdirState, saved: SavedPlan
    ) -> tuple[tuple[ResourceChange, ...], tuple[ResourceChange, ...], tuple[Diagnostic, ...]]:
        """Deletes and updates now, then the creates the model lets through after one launch latency."""
        now = self.clock()
        wanted: Mapping[str, Any] = saved.variables.get("instances") or {}
        done: list[ResourceChange] = []
        creates: list[ResourceChange] = []
        for change in saved.changes:
            key = str(change.key)
            if change.action == "delete":
                self.cloud.end(key, now)
                state.drop(key)
                done.append(change)
            elif change.action == "update":
                self._update(site, key, state, saved.variables, wanted[key])
                done.append(change)
            elif change.action == "create":
                creates.append(change)
        failed: list[ResourceChange] = []
        diags: list[Diagnostic] = []
        made: list[ResourceChange] = []
        for change in creates:
            spec = wanted[str(change.key)]
            window = self._refusal(site, spec, now)
            if window is None:
                made.append(change)
            else:
                failed.append(change)
                diags.append(refusal_diagnostic(site, str(change.key), spec, window))
        if made:
            self.clock.advance(self.model.latencies.draw_launch(self.rng))
            launched = rfc3339(self.clock())[1]
            for change in made:
                self._create(site, state, saved.variables, str(change.key), launched)
            done += made
        return tuple(done), tuple(failed), tuple(diags)

    def _refusal(self, site: Site, spec: Mapping[str, Any], now: float) -> RefusalWindow | None:
        """The model's window refusing this entry now (by its rendered offering, or the offering
        its ``xce:offering`` tag names), or None."""
        window = self.model.refused(site.provider, spec_offering(spec), now)
        named = (spec.get("tags") or {}).get("xce:offering")
        if window is None and named:
            window = self.model.refused(site.provider, str(named), now)
        return window

    def _create(self, site: Site, state: WorkdirState, variables: Mapping[str, Any], key: str, when: float) -> None:
        spec = variables["instances"][key]
        labelled = cloud_tags(variables, spec)
        inst = self.cloud.instances.get(key)
        if inst is None or not inst.live:  # a live one is the same client token: the cloud returns it
            tags = labelled if site.entry.labels.identity else site.entry.labels.from_labels(labelled)
            inst = self.cloud.create(key, site.provider, str(spec["name"]), tags, spec_offering(spec), when)
            inst.state = STOPPED if spec.get("power_state") == STOPPED else RUNNING
        state.instances[key] = output_entry(inst, labelled, fake_address(inst.instance_id))
        if spec.get("power_state") is not None:
            state.power[key] = power_of(inst)

    def _update(
        self, site: Site, key: str, state: WorkdirState, variables: Mapping[str, Any], spec: Mapping[str, Any]
    ) -> None:
        """A start or stop in place (the warm pool) and the tags as now desired; an instance the
        cloud ended since the plan stays ended (the next refresh reports it)."""
        inst = self.cloud.instances[key]
        if not inst.live:
            return
        power = spec.get("power_state")
        if power is not None:
            inst.state = STOPPED if power == STOPPED else RUNNING
            state.power[key] = power
        labelled = cloud_tags(variables, spec)
        state.instances[key]["tags"] = dict(labelled)
        inst.tags = labelled if site.entry.labels.identity else site.entry.labels.from_labels(labelled)

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        """``show -json`` of a saved plan: its variables, changes, drift and the ``tagged`` listing."""
        wd = Path(workdir)
        saved = self._saved(wd, plan_file)
        site = self._site(wd, saved.variables)
        state = self.state(wd)

        def entry(change: ResourceChange, actions: list[str]) -> dict[str, Any]:
            held = state.instances.get(str(change.key))
            return {
                "address": change.addr,
                "mode": "managed",
                "type": change.type,
                "name": change.name,
                "index": change.key,
                "change": {"actions": actions, "before": dict(held) if held else None, "after": None},
            }

        tagged = listing(site, self.cloud, self.clock()) if site.lists else {}
        return {
            "format_version": "1.2",
            "variables": {name: {"value": value} for name, value in saved.variables.items()},
            "planned_values": {
                "outputs": {
                    "tagged_supported": {"value": site.lists},
                    "tagged": {"value": tagged},
                    "tagged_images": {"value": {}},
                }
            },
            "resource_drift": [entry(c, ["delete"]) for c in saved.drift],
            "resource_changes": [entry(c, [c.action]) for c in saved.changes],
        }

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        """Refused: nothing outside the model exists to import."""
        raise TerraformError(f"Error: Cannot import non-existent remote object {resource_id!r} (replay model)")

    def show_state(self, workdir: Path) -> dict[str, Any]:
        """``show -json`` of the state: its ``instances`` output and one resource per key."""
        return show_state_document(self.sites.get(Path(workdir)), self.state(workdir))

    def output(self, workdir: Path) -> dict[str, Any]:
        """The root outputs: ``instances`` (id, name, address, launch_time, tags) and no images."""
        return outputs(self.state(workdir))

    def fmt_check(self, path: Path) -> list[str]:
        """The shipped roots are formatted; nothing to report."""
        return []

    def validate(self, workdir: Path) -> list[Diagnostic]:
        """The shipped roots are valid; nothing to report."""
        return []


def _summary(changes: Sequence[ResourceChange]) -> Summary:
    return Summary(
        add=sum(c.action == "create" for c in changes),
        change=sum(c.action == "update" for c in changes),
        remove=sum(c.action == "delete" for c in changes),
    )


def _hooks(
    done: Sequence[ResourceChange], failed: Sequence[ResourceChange], diags: Sequence[Diagnostic]
) -> list[ApplyHook | Diagnostic]:
    """The apply's events as Terraform streams them: each change started then completed or errored."""
    events: list[ApplyHook | Diagnostic] = []
    for change in done:
        events += [ApplyHook("start", change), ApplyHook("complete", change)]
    for change in failed:
        events += [ApplyHook("start", change), ApplyHook("errored", change)]
    return [*events, *diags]


if TYPE_CHECKING:

    def _an_engine(engine: ModelEngine) -> Engine:
        """mypy proves here that the model engine is a Terraform ``Engine``."""
        return engine
