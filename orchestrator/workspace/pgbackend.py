"""Terraform's own ``pg`` backend for the working directories (``terraform.backend: pg``).

Each shard's state lives in its own PostgreSQL schema, ``<cluster>_<provider>_<n>`` (shard 0
included), as the one row ``default`` of the table ``<schema>.states`` that Terraform manages;
Terraform locks that state with an advisory lock while it writes. The shipped roots stay
local-backend files: a working directory of a ``pg`` site gets one generated file more,
``backend.tf`` (:data:`BACKEND_TF`), and ``init`` gets the schema as ``-backend-config``; the
connection string reaches Terraform only through its environment (:mod:`.pgconn`).

Schema names: PostgreSQL folds unquoted identifiers to lowercase and keeps 63 bytes of them, and
cluster and provider names may hold ``-`` and ``_`` and be 40 characters long. A name made of
lowercase letters and digits only, short enough, is used as it is (``site1_aws_0``: it ends in
``_<digits>``). Any other gets its ``-`` turned into ``_``, is cut to fit, and ends in a digest
of the exact cluster, provider and shard (``my_site_aws_0_h<12 hex>``), so two different shards
never share a schema: a plain name never ends in ``_h...``, and two digested ones meet only on a
48-bit digest collision.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from orchestrator.clients.ansible.inventory import shard_dirs
from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import ConfigError, TerraformError
from orchestrator.model.config import Config

BACKEND_TF: Final = "backend.tf"
BACKEND_BLOCK: Final = 'terraform {\n  backend "pg" {}\n}\n'
LOCAL_STATE: Final = "terraform.tfstate"
# What xceprov terraform migrate-state keeps of a local state it moved (never deleted).
MIGRATED_STATE: Final = "terraform.tfstate.migrated"
MIGRATE_COMMAND: Final = "xceprov terraform migrate-state"
# Terraform's record of the backend a working directory was initialised for.
BACKEND_RECORD: Final = Path(".terraform") / "terraform.tfstate"
_PLAIN: Final = re.compile(r"^[a-z][a-z0-9]*$")
_MAX_IDENTIFIER: Final = 63
_DIGEST_HEX: Final = 12


def schema_name(cluster: str, provider: str, index: int) -> str:
    """The PostgreSQL schema holding shard ``index`` of ``provider`` in ``cluster`` (a valid identifier)."""
    plain = f"{cluster}_{provider}_{index}"
    if _PLAIN.match(cluster) and _PLAIN.match(provider) and len(plain) <= _MAX_IDENTIFIER:
        return plain
    digest = hashlib.sha256(f"{cluster}\0{provider}\0{index}".encode()).hexdigest()[:_DIGEST_HEX]
    readable = f"{cluster}_{provider}_{index}".replace("-", "_")
    room = _MAX_IDENTIFIER - len(digest) - 2
    return f"{readable[:room]}_h{digest}"


def local_state_held(workdir: Path) -> bool:
    """Whether ``workdir`` holds a local Terraform state (a non-empty ``terraform.tfstate``).

    Terraform empties the file, rather than removing it, when it moves a state to a backend.
    """
    try:
        return (workdir / LOCAL_STATE).stat().st_size > 0
    except FileNotFoundError:
        return False


def initialised_backend(workdir: Path) -> str | None:
    """The backend type ``workdir`` was last initialised for (``pg``; None: local or never initialised)."""
    try:
        record = json.loads((workdir / BACKEND_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    backend = record.get("backend") if isinstance(record, dict) else None
    kind = backend.get("type") if isinstance(backend, dict) else None
    return str(kind) if kind else None


def refuse_mixed_backends(workdir: Path, backend: str) -> None:
    """ConfigError (one line) when ``workdir``'s state is not where ``terraform.backend`` says.

    ``pg`` with a local state still in the working directory: a new, empty remote state beside
    the populated local one would make Terraform create every instance again; the migration
    moves it first. ``local`` with a directory initialised for ``pg``: its state is in PostgreSQL
    and a local one would start empty; there is no way back but the ``pg`` backend.
    """
    if backend == "pg" and local_state_held(workdir):
        raise ConfigError(
            [
                f"terraform.backend: pg, but {workdir / LOCAL_STATE} still holds a local Terraform state; "
                f"run {MIGRATE_COMMAND} first (nothing was changed)"
            ]
        )
    if backend == "local" and initialised_backend(workdir) == "pg":
        raise ConfigError(
            [
                f"terraform.backend: local, but {workdir} keeps its Terraform state in PostgreSQL (backend pg); "
                "set terraform.backend: pg again (moving states back to local files is not supported)"
            ]
        )


def resource_objects(state: Mapping[str, Any]) -> frozenset[tuple[str, ...]]:
    """Every resource instance of a state as (module, mode, type, name, index key, object id).

    What a moved state must hold exactly: Terraform starts a new lineage and serial in the
    backend it migrates to, so those cannot be compared, but the objects it tracks can.
    """
    found: set[tuple[str, ...]] = set()
    for resource in state.get("resources") or []:
        if not isinstance(resource, dict):
            continue
        head = tuple(str(resource.get(k, "")) for k in ("module", "mode", "type", "name"))
        for instance in resource.get("instances") or []:
            if isinstance(instance, dict):
                key = json.dumps(instance.get("index_key"), sort_keys=True)
                ident = str((instance.get("attributes") or {}).get("id", ""))
                found.add((*head, key, ident))
    return frozenset(found)


def refuse_unmigrated(config: Config) -> None:
    """ConfigError naming every shard of the site whose state is not where ``terraform.backend`` says.

    What a daemon checks at start and ``xceprov validate`` reports: a shard left behind would be
    refused at its first use anyway (:func:`refuse_mixed_backends`), pass after pass.
    """
    problems: list[str] = []
    for shard in shard_dirs(config.state_dir, config.cluster):
        try:
            refuse_mixed_backends(shard.path, config.terraform.backend)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)


def state_summary(state: Mapping[str, Any]) -> tuple[int, str, int]:
    """(serial, lineage, number of resource instances) of a Terraform state document."""
    instances = sum(len(r.get("instances") or []) for r in state.get("resources") or [] if isinstance(r, dict))
    return int(state.get("serial") or 0), str(state.get("lineage") or ""), instances


def ensure_remote_state(engine: Engine, workdir: Path) -> None:
    """Give a shard without a state in its schema an empty one, right after its ``init``.

    Terraform's pg backend takes a database-wide advisory lock while it creates a workspace's
    state, and holds it for the whole command that creates it (its first plan or apply): every
    other state of the database would wait that long. An empty state written here, in a
    moment, means no plan or apply ever creates one. Two orchestrators doing this at once are
    fine: Terraform refuses a push over a state that holds anything, and then there is one.
    """
    if _has_state(engine, workdir):
        return
    empty = {"version": 4, "terraform_version": "1.0.0", "serial": 0, "lineage": str(uuid.uuid4())}
    try:
        engine.state_push(workdir, {**empty, "outputs": {}, "resources": []})
    except TerraformError:
        if not _has_state(engine, workdir):
            raise


def _has_state(engine: Engine, workdir: Path) -> bool:
    return bool(engine.state_pull(workdir).get("lineage"))
