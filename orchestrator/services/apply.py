"""``xceprov apply BUNDLE``: carry out exactly the ops a ``plan --out`` saved, through the executor.

A saved plan was made without a lease, so its instances are tagged ``xce:epoch=none``; the
cloud must get the real epoch. So the bundle is read for its ops (op id, template, count: from
the planned instances' owner tags) and each op is carried out by the executor under the
provider's lease: intent fact, desired set, a fresh plan with the epoch stamped, checked to
create exactly the op's instances and nothing else, apply, instance facts. Exactness: the
bundle is refused (``StaleState``, exit 7) unless the provider's desired set is still the one it
was planned against; the fresh plan is refused (``UnsafePlan``, exit 8) if it would do anything
beyond the saved plan's creates (for example when the state moved under the desired set).
Host loss: the bundle names the instances its preview showed as lost; the same read-only
observation is made again here, under the working directory's lock and before any lease, and
the bundle is refused as stale (exit 7, nothing changed) unless it finds exactly those. So the
apply records as lost and creates what the preview showed, never something else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import FinalError, StaleState, UsageError
from orchestrator.model import tags as owner
from orchestrator.model.instances import InstanceSpec, instance_key
from orchestrator.model.labels import AS_IS, LabelMap
from orchestrator.model.offerings import Placement
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.executor import Bootstrap, CreateResult, Executor, Wired
from orchestrator.ops.losses import preview_losses
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.ops import fenced_session, playbook_callables, refuse_when_leased
from orchestrator.workspace.audit import audit
from orchestrator.workspace.bundle import read_bundle
from orchestrator.workspace.terraform import engine_for, ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


@dataclass(frozen=True)
class AppliedProvider:
    """What one provider holds after the apply (key → {id, name, address, ...}) and the ops done."""

    name: str
    instances: dict[str, dict[str, Any]]
    ops: tuple[CreateResult, ...] = ()


@dataclass(frozen=True)
class BundleOp:
    """One op of a saved plan."""

    provider: str
    op_id: str
    template: str
    count: int
    # The offerings its keys were planned on, in key order (their xce:offering tags; none: a
    # bundle saved before offerings, every key on the default offering).
    placements: tuple[Placement, ...] = ()


def runs(names: Sequence[str]) -> tuple[Placement, ...]:
    """Keys' offering names in key order as placements (runs of one name); none when a key has
    none (a plan made before offerings: the default offering renders every key again)."""
    out: list[Placement] = []
    for name in names:
        if not name:
            return ()
        if out and out[-1].offering == name:
            out[-1] = Placement(name, out[-1].count + 1)
        else:
            out.append(Placement(name, 1))
    return tuple(out)


def bundle_ops(
    provider: str,
    shown: dict[str, Any],
    where: Path,
    desired: frozenset[str] = frozenset(),
    labels: LabelMap | None = None,
) -> list[BundleOp]:
    """The ops a saved plan creates, from its planned instances' owner tags (the module's labels,
    read back through ``labels``, the provider's label map; default: tags as they are).

    A create of a key already in the ``desired`` set is no op of the bundle: it is Terraform
    re-creating an instance the cloud lost (spot reclaim, out-of-band delete), which the
    executor's host-loss check takes out of the desired set instead (never re-created).
    """
    variables = {k: v.get("value") for k, v in shown.get("variables", {}).items()}
    planned = variables.get("instances") or {}
    creates = sorted(
        str(rc.get("index"))
        for rc in shown.get("resource_changes", [])
        if "create" in rc.get("change", {}).get("actions", [])
        and rc.get("index") is not None
        and str(rc.get("index")) not in desired
    )
    grouped: dict[str, list[str]] = {}
    templates: dict[str, str] = {}
    offerings: dict[str, str] = {}
    back = (labels or AS_IS).from_labels
    for key in creates:
        spec = InstanceSpec.model_validate(planned[key]) if key in planned else None
        tags = back(spec.tags) if spec is not None else {}
        if spec is None or not tags.get(owner.OP_ID):
            raise UsageError(f"{where}: planned instance {key} has no {owner.OP_ID} tag; not a plan of xceprov")
        grouped.setdefault(tags[owner.OP_ID], []).append(key)
        templates[tags[owner.OP_ID]] = spec.template
        if tags.get(owner.OFFERING):
            offerings[key] = tags[owner.OFFERING]
    ops = []
    for op_id, keys in sorted(grouped.items()):
        if sorted(keys) != [instance_key(op_id, i) for i in range(len(keys))]:
            raise UsageError(f"{where}: op {op_id} plans keys {keys}, not a whole op")
        ops.append(BundleOp(provider, op_id, templates[op_id], len(keys), runs([offerings.get(k, "") for k in keys])))
    return ops


def _check_fresh(
    engine: Engine,
    workdir: ProviderWorkdir,
    shown: dict[str, Any],
    ops: list[BundleOp],
    bundle: Path,
    lost: frozenset[str],
) -> None:
    """Refuse (``StaleState``) unless the desired set and the losses are those of the preview."""
    planned = set(shown.get("variables", {}).get("instances", {}).get("value") or {})
    new = {instance_key(op.op_id, i) for op in ops for i in range(op.count)}
    current = set(workdir.desired.read())
    # The preview planned the desired set without the instances it showed as lost.
    if planned - new != current - lost or not lost <= current:
        raise StaleState(
            f"saved plan is stale: {bundle} was planned against another desired set of provider {workdir.provider} "
            f"({len(planned - new) + len(lost)} instances then, {len(current)} now); make a new plan"
        )
    now = {item.instance_key for item in preview_losses(engine, workdir)} if current else set()
    if now != lost:
        raise StaleState(
            f"saved plan is stale: {bundle}: its preview showed {_named(lost)} lost on provider {workdir.provider}, "
            f"the cloud now shows {_named(now)} lost; make a new plan"
        )


def _named(keys: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(keys)) if keys else "no instance"


@contextmanager
def _executor(
    loaded: LoadedConfig,
    providers: list[str],
    root: Path,
    engine: Engine,
    boot: Bootstrap | None,
    wired: Wired | None,
    progress: ProgressSink | None,
) -> Iterator[Executor]:
    if wired is not None:
        yield wired.executor
        return
    with fenced_session(loaded, providers, root, engine=engine, bootstrap=boot, progress=progress) as session:
        yield session.executor


def apply_bundle(
    loaded: LoadedConfig,
    bundle: Path,
    toolkit_root: Path,
    engine: Engine | None = None,
    *,
    wired: Wired | None = None,
    bootstrap: bool = False,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
) -> list[AppliedProvider]:
    """Carry out every op of ``bundle`` under the leases; stop at the first refusal.

    ``progress`` gets each op's plans, applied instances and bootstrapped hosts as they happen.
    """
    config = loaded.config
    entries = read_bundle(bundle, config.cluster)
    for entry in entries:
        if entry.provider not in config.providers:
            raise UsageError(f"{bundle}: provider {entry.provider!r} is not in the configuration")
    engine = engine or (wired.parts.engine if wired is not None else engine_for(config))
    if wired is None:
        refuse_when_leased(loaded, sorted({e.provider for e in entries}))
    planned: dict[str, list[BundleOp]] = {}
    for entry in entries:
        workdir = ProviderWorkdir(config, entry.provider, toolkit_root)
        ready_workdir(engine, workdir)
        with workdir.lock():
            shown = engine.show_plan(workdir.path, entry.plan_file)
            ops = bundle_ops(entry.provider, shown, entry.plan_file, frozenset(workdir.desired.read()), workdir.labels)
            audit(
                config.state_dir,
                "apply",
                provider=entry.provider,
                bundle=str(bundle),
                ops=[(o.op_id, o.template, o.count) for o in ops],
            )
            try:
                _check_fresh(engine, workdir, shown, ops, bundle, entry.lost)
            except StaleState:
                audit(
                    config.state_dir, "apply-refused", provider=entry.provider, bundle=str(bundle), reason="stale plan"
                )
                raise
        planned[entry.provider] = ops
    applied: list[AppliedProvider] = []
    boot = playbook_callables(loaded, toolkit_root, world, progress)[0] if bootstrap else None
    with _executor(loaded, sorted(planned), toolkit_root, engine, boot, wired, progress) as ex:
        for provider, ops in planned.items():
            results = tuple(
                ex.create(provider, op.template, op.count, op_id=op.op_id, placements=op.placements) for op in ops
            )
            held = {k: v for shard in ex.shards(provider) for k, v in ex.held(shard).items()}  # every shard
            audit(config.state_dir, "applied", provider=provider, bundle=str(bundle), instances=len(held))
            applied.append(AppliedProvider(provider, held, results))
    return applied


def bootstrap_failure(applied: list[AppliedProvider]) -> FinalError | None:
    """What ``apply --bootstrap`` ends with when the play failed on a new host: exit 1, as
    ``xceprov bootstrap`` for the same outcome (docs/exit-codes.md). The ops are complete and
    their instances stay, to be bootstrapped again by hand; the line says how."""
    failed = [(op.op_id, name) for p in applied for op in p.ops for name in op.bootstrap_failed]
    if not failed:
        return None
    total = sum(len(op.bootstrap) for p in applied for op in p.ops)
    hosts = sorted(name for _op, name in failed)
    named = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    again = "; ".join(f"xceprov bootstrap --op {op_id}" for op_id in sorted({op_id for op_id, _name in failed}))
    return FinalError(
        f"bootstrap failed on {len(hosts)} of {total} new hosts ({named}); the instances are kept: "
        f"{again} runs the play on them again"
    )
