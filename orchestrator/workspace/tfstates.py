"""Reading the Terraform state of every shard without running Terraform, whatever the backend.

A ``local`` shard's state is its ``terraform.tfstate``; a ``pg`` shard's (one with the generated
``backend.tf``) is the row ``default`` of ``<schema>.states``, the table Terraform's pg backend
keeps (:mod:`.pgbackend`), read by :class:`~orchestrator.clients.postgres.TerraformStates`
rather than with ``terraform state pull`` in each working directory: one connection serves every
shard of the site, where a pull would start Terraform once per shard (a fifth of a second each
with the bundled engine), and the inventory plugin, which knows only the state directory and
``$PG_CONN_STR``, needs no engine or CLI configuration. The table is Terraform's, so it is only
ever read, never written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator import durable
from orchestrator.clients.ansible.inventory import ShardDir, StateReader, local_state
from orchestrator.clients.postgres import TerraformStates
from orchestrator.errors import ConfigError
from orchestrator.workspace.pgbackend import BACKEND_TF, schema_name
from orchestrator.workspace.pgconn import PG_CONN_ENV


class StateRows:
    """A :data:`StateReader` for both backends; the database connection is opened on the first pg shard."""

    def __init__(self, conn_str: str | None) -> None:
        self._tables = TerraformStates(conn_str) if conn_str else None

    def __call__(self, shard: ShardDir) -> Mapping[str, Any] | None:
        if not (shard.path / BACKEND_TF).is_file():
            return local_state(shard)
        if self._tables is None:
            raise ConfigError(
                [f"{shard.path}: its Terraform state is in PostgreSQL (backend pg): set ${PG_CONN_ENV} to read it"]
            )
        return self.read_schema(schema_name(shard.cluster, shard.provider, shard.index), str(shard.path))

    def read_schema(self, schema: str, label: str) -> Mapping[str, Any] | None:
        """The state Terraform keeps in ``schema`` (None when there is none); ``label`` names it in errors."""
        assert self._tables is not None, "a pg state read without a connection string"
        text = self._tables.state_text(schema, label)
        if text is None:
            return None
        try:
            state = durable.parse_json(text)
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._tables is not None:
            self._tables.close()


@contextlib.contextmanager
def state_reader(conn_str: str | None) -> Iterator[StateReader]:
    """A reader of every shard's state for the block (``conn_str``: the pg site's, else None)."""
    rows = StateRows(conn_str)
    try:
        yield rows
    finally:
        rows.close()
