"""``xceprov destroy``: return instances the toolkit made, by op or all of a provider, exactly.

Only instances in the provider's desired sets (made by this toolkit, in this cluster's working
directories: every shard of the provider) can be named; nothing else in the cloud is ever
touched. ``--all`` also deletes the baked images shard 0's desired set keeps (docs/images.md),
each as ``xceprov image delete`` does, after the instances (``--max`` counts instances only).
Every return goes through the executor (``orchestrator.ops``): the desired sets are
read under their working directories' locks, the removal is planned and checked (deletes
exactly the chosen instances), ``--max`` counts the plan's deletions, ``--dry-run`` stops
after the plan. Hosts that joined and run work are refused unless ``force`` (still audited,
still with a ``returning`` intent); ``xceprov return`` drains them instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.images import BakedImage
from orchestrator.model.instances import new_op_id, op_of_key
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import Executor, OpParts, Wired
from orchestrator.ops.facts import NoFacts
from orchestrator.ops.fence import ReadOnlyFence
from orchestrator.ops.hosts import NoHosts
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.ops import fenced_session, playbook_callables, refuse_when_leased
from orchestrator.workspace.terraform import engine_for


@dataclass
class DestroyResult:
    """Per provider: the instance keys planned for removal and whether they were removed."""

    dry_run: bool
    removed: dict[str, list[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    deletes: dict[str, list[str]] = field(default_factory=dict)
    images: dict[str, list[str]] = field(default_factory=dict)  # provider → image ids (``--all``)


def select_keys(
    executor: Executor, providers: Sequence[str], ops: Sequence[str], all_instances: bool
) -> dict[str, list[str]]:
    """The chosen instance keys per provider (every shard's desired set, each read under its lock)."""
    selected: dict[str, list[str]] = {}
    found_ops: set[str] = set()
    for name in providers:
        desired = executor.desired(name)
        keys = sorted(k for k in desired if all_instances or op_of_key(k) in ops)
        found_ops.update(op_of_key(k) for k in keys)
        if keys:
            selected[name] = keys
    missing = sorted(set(ops) - found_ops)
    if missing:
        raise UsageError(f"--op {', '.join(missing)}: no instances of that op in this cluster's desired sets")
    return selected


def destroy(
    loaded: LoadedConfig,
    toolkit_root: Path,
    ops: Sequence[str] = (),
    all_instances: bool = False,
    provider: str | None = None,
    dry_run: bool = False,
    max_destroy: int = 50,
    engine: Engine | None = None,
    *,
    force: bool = False,
    wired: Wired | None = None,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
) -> DestroyResult:
    """Remove the instances of ``ops`` (or every instance with ``all_instances``).

    ``progress`` gets the plans, the destroyed instances and the decommissioned hosts.
    """
    config = loaded.config
    if not ops and not all_instances:
        raise UsageError("name what to destroy: --op OP (repeatable) or --all")
    if provider is not None and provider not in config.providers:
        raise UsageError(f"--provider {provider}: no such provider (known: {', '.join(sorted(config.providers))})")
    providers = [provider] if provider else sorted(config.providers)
    engine = engine or (wired.parts.engine if wired is not None else engine_for(config))
    if wired is None and not dry_run:
        refuse_when_leased(loaded, providers)
    reader = Executor(OpParts(config, toolkit_root, engine, ReadOnlyFence(), NoFacts(), NoHosts(), progress=progress))
    selected = select_keys(reader, providers, ops, all_instances)
    images = {n: kept for n in providers if all_instances and (kept := reader.kept_images(n))}
    result = DestroyResult(dry_run=dry_run)
    if dry_run:
        for name, keys in selected.items():
            done = reader.return_instances(name, keys, dry_run=True, reason="destroy --dry-run")
            result.removed[name], result.deletes[name] = keys, done.deleted
            result.names.update(done.names)
        result.images = {n: [i.id for i in kept] for n, kept in images.items()}
        return result
    if not selected and not images:
        return result
    budget = max_destroy
    if wired is None:
        decommission = playbook_callables(loaded, toolkit_root, world, progress)[1]
        with fenced_session(
            loaded,
            sorted({*selected, *images}),
            toolkit_root,
            engine=engine,
            decommission=decommission,
            progress=progress,
        ) as session:
            return _images(session.executor, images, _run(session.executor, selected, budget, force, result))
    return _images(wired.executor, images, _run(wired.executor, selected, budget, force, result))


def _images(executor: Executor, images: dict[str, list[BakedImage]], result: DestroyResult) -> DestroyResult:
    """``--all``: the kept baked images deleted after the instances, each as ``image delete`` does."""
    for name, kept in images.items():
        for image in kept:
            executor.delete_image(name, image, new_op_id())
            result.images.setdefault(name, []).append(image.id)
    return result


def _run(
    executor: Executor, selected: dict[str, list[str]], budget: int, force: bool, result: DestroyResult
) -> DestroyResult:
    total = sum(len(k) for k in selected.values())
    for name, keys in selected.items():
        if not keys:
            continue
        # --max counts Terraform's deletions over the whole run: each provider gets what is left.
        done = executor.return_instances(
            name,
            keys,
            drain=DrainSettings(drain=False, force=force),
            max_delete=budget,
            reason=f"destroy{' --force' if force else ''} ({total} instances asked)",
        )
        budget -= len(done.deleted)
        result.removed[name], result.deletes[name] = keys, done.deleted
        result.names.update(done.names)
    return result
