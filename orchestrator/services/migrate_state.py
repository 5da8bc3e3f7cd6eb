"""``xceprov terraform migrate-state``: every shard's local Terraform state into the pg backend.

A site switching to ``terraform.backend: pg`` (docs/operations.md, "Upgrading to the pg backend")
runs it once: each shard working directory that still holds a local ``terraform.tfstate`` is
moved with Terraform's own ``init -migrate-state`` and checked
(:mod:`orchestrator.workspace.statemigration`); nothing is re-created and nothing is lost. The
local state files the shared store keeps with ``pg`` (desired sets, suspects, breakers, bootstrap
records, orphan limits) are copied into it (:mod:`.migrate_documents`). Until
then every verb refuses such a directory (:func:`orchestrator.workspace.pgbackend.refuse_mixed_backends`).

The states must not change under the move: a live holder of a provider's lease (a daemon, another
command) is refused first (exit 9, nothing read or changed), standalone sites take the providers'
local locks for the time of the move, and each shard's own lock is held while it moves. A second
run finds nothing to move. ``dry_run`` only lists what would move.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.ops.fence import StandaloneFence
from orchestrator.services.migrate_documents import migrate_documents
from orchestrator.services.ops import refuse_when_leased
from orchestrator.workspace.audit import audit
from orchestrator.workspace.pgconn import pg_conn_str
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.statemigration import ShardMove, migrate_shard, pending, planned_move
from orchestrator.workspace.terraform import engine_for
from orchestrator.workspace.tfstates import StateRows
from orchestrator.workspace.workdir import ProviderWorkdir


@dataclass
class MigrationReport:
    """The shards moved (or, in a dry run, that would move)."""

    dry_run: bool
    moves: list[ShardMove] = field(default_factory=list)
    # The local state files copied into the shared store (services/migrate_documents.py).
    documents: list[str] = field(default_factory=list)


def migrate_states(
    loaded: LoadedConfig, toolkit_root: Path, dry_run: bool = False, engine: Engine | None = None
) -> MigrationReport:
    """Move every shard's local state into the pg backend (or list them with ``dry_run``)."""
    config = loaded.config
    if config.terraform.backend != "pg":
        raise UsageError(
            f"{loaded.source}: terraform.backend is local: set terraform.backend: pg first, "
            "then migrate-state moves the local states into it"
        )
    conn_str = pg_conn_str(config)  # no connection string: one line before anything is read
    todo = [shard for name in sorted(config.providers) for shard in _shards(loaded, name, toolkit_root)]
    report = MigrationReport(dry_run)
    if dry_run or not todo:
        report.moves = [planned_move(shard) for shard in todo]
        if not dry_run:
            report.documents = _documents(loaded, toolkit_root)
        return report
    providers = sorted({shard.provider for shard in todo})
    refuse_when_leased(loaded, providers)
    engine = engine or engine_for(config)
    remote = StateRows(conn_str)
    try:
        with _standalone_locks(loaded, providers):
            for shard in todo:
                # Held like any writer of the shard: a plan reading it meanwhile waits, then sees pg.
                with shard.lock():
                    move = migrate_shard(engine, shard, remote.read_schema)
                report.moves.append(move)
                audit(
                    config.state_dir,
                    "terraform-state-migrated",
                    provider=move.provider,
                    shard=move.index,
                    schema=move.schema,
                    serial=move.serial,
                    lineage=move.lineage,
                    instances=move.instances,
                )
    finally:
        remote.close()
    report.documents = _documents(loaded, toolkit_root)
    return report


def _documents(loaded: LoadedConfig, toolkit_root: Path) -> list[str]:
    """The desired sets, suspects, breakers, bootstrap records and orphan limits into the store."""
    copied = migrate_documents(loaded.config, toolkit_root)
    if copied:
        audit(loaded.config.state_dir, "state-documents-migrated", documents=copied)
    return copied


def _shards(loaded: LoadedConfig, provider: str, toolkit_root: Path) -> list[ProviderWorkdir]:
    return [shard for shard in ProviderShards(loaded.config, provider, toolkit_root).all() if pending(shard)]


@contextlib.contextmanager
def _standalone_locks(loaded: LoadedConfig, providers: list[str]) -> Iterator[None]:
    """With ``standalone: true``, the providers' local locks (LeaseHeld, exit 9, when a process holds one)."""
    if not loaded.config.standalone:
        yield
        return
    with StandaloneFence(loaded.config.state_dir / "locks", providers):
        yield
