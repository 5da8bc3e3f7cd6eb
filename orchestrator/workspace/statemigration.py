"""Moving one shard's local Terraform state into the pg backend, with Terraform's own migration.

For a shard whose working directory holds a local ``terraform.tfstate`` (:mod:`.pgbackend`):

1. the schema must be empty, or hold no object this state lacks (a run cut short before): a
   different state there is never overwritten (``-force-copy`` would);
2. a durable copy of the local state is written beside it, ``terraform.tfstate.migrating``;
3. the generated ``backend.tf`` is written and Terraform runs ``init -migrate-state -force-copy``
   with the shard's schema (Terraform copies the state and empties the local file);
4. ``terraform state pull`` must give the very resource instances of the local state (the same
   addresses and object ids; Terraform starts a new lineage and serial in the backend, so those
   cannot be compared);
5. only then the copy becomes ``terraform.tfstate.migrated`` (kept, never deleted) and the
   emptied local file goes.

When step 3 or 4 fails, the local state is put back as it was and the directory is made local
again (its next use initialises it afresh), so nothing is half-done; a copy still named
``.migrating`` (a run killed in between) is picked up and finished by the next run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator import durable
from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import TerraformError
from orchestrator.workspace.pgbackend import (
    BACKEND_RECORD,
    BACKEND_TF,
    LOCAL_STATE,
    MIGRATED_STATE,
    local_state_held,
    resource_objects,
    state_summary,
)
from orchestrator.workspace.workdir import STAMP, ProviderWorkdir

MIGRATING_STATE: Final = "terraform.tfstate.migrating"

# Reads the state the pg backend holds in a schema (None: none yet); label names it in errors.
RemoteState = Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class ShardMove:
    """One shard's state to move (or moved): where, into which schema, and what it holds."""

    provider: str
    index: int
    path: Path
    schema: str
    serial: int
    lineage: str
    instances: int


def pending(shard: ProviderWorkdir) -> bool:
    """Whether ``shard`` has a local state still to move (or a move cut short to finish)."""
    return local_state_held(shard.path) or (shard.path / MIGRATING_STATE).is_file()


def planned_move(shard: ProviderWorkdir) -> ShardMove:
    """What moving ``shard`` would move (read from its local state; TerraformError when unreadable)."""
    serial, lineage, instances = state_summary(_local_document(shard.path))
    schema = shard.backend_config()["schema_name"]
    return ShardMove(shard.provider, shard.index, shard.path, schema, serial, lineage, instances)


def migrate_shard(engine: Engine, shard: ProviderWorkdir, remote: RemoteState) -> ShardMove:
    """Move ``shard``'s local state into its schema (see the module's steps); the move made."""
    move = planned_move(shard)
    objects = resource_objects(_local_document(shard.path))
    copy = shard.path / MIGRATING_STATE
    there = remote(move.schema, f"schema {move.schema}") or {}
    if not local_state_held(shard.path):
        # A move cut short after Terraform emptied the local file: the schema has the state,
        # or the copy never happened and the local state is put back to move again.
        if resource_objects(there) == objects:
            durable.replace(copy, shard.path / MIGRATED_STATE)
            return move
        _put_back(shard.path)
    if resource_objects(there) - objects:
        raise TerraformError(
            f"{shard.path}: schema {move.schema} already holds another Terraform state "
            f"({len(resource_objects(there))} resource instances); it is not overwritten "
            "and the local state stays where it is"
        )
    durable.write_bytes_atomic(copy, (shard.path / LOCAL_STATE).read_bytes())
    try:
        shard.populate(shard.path)  # the sources as they are, and the generated backend.tf
        engine.migrate_state(shard.path, shard.backend_config())
        moved = resource_objects(engine.state_pull(shard.path))
    except TerraformError:
        _put_back(shard.path)
        raise
    if moved != objects:
        _put_back(shard.path)
        raise TerraformError(
            f"{shard.path}: schema {move.schema} holds {len(moved)} resource instances after the move, "
            f"{len(moved ^ objects)} of them other than the local state's {len(objects)}; "
            "the local state was put back and nothing else changed"
        )
    durable.replace(copy, shard.path / MIGRATED_STATE)
    durable.remove(shard.path / LOCAL_STATE)
    return move


def _local_document(workdir: Path) -> dict[str, Any]:
    """The local state to move: ``terraform.tfstate``, or the copy of a move cut short."""
    source = workdir / LOCAL_STATE if local_state_held(workdir) else workdir / MIGRATING_STATE
    try:
        document = durable.parse_json(source.read_bytes())
    except (OSError, ValueError) as exc:
        raise TerraformError(f"{source}: not a readable Terraform state ({exc}); nothing was moved") from None
    if not isinstance(document, dict):
        raise TerraformError(f"{source}: not a Terraform state document; nothing was moved")
    return document


def _put_back(workdir: Path) -> None:
    """The local state as it was before the move, and the directory local again (re-initialised on its next use)."""
    copy = workdir / MIGRATING_STATE
    if copy.is_file():
        durable.write_bytes_atomic(workdir / LOCAL_STATE, copy.read_bytes())
        durable.remove(copy)
    for generated in (workdir / BACKEND_TF, workdir / BACKEND_RECORD, workdir / STAMP):
        with contextlib.suppress(FileNotFoundError):
            generated.unlink()
