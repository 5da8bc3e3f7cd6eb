"""Reading the Terraform state of every shard without running Terraform, whatever the backend.

A ``local`` shard's state is its ``terraform.tfstate``; a ``pg`` shard's (one with the generated
``backend.tf``) is the row ``default`` of ``<schema>.states``, the table Terraform's pg backend
keeps (:mod:`.pgbackend`). The row is read here with psycopg rather than with ``terraform state
pull`` in each working directory: one connection serves every shard of the site, where a pull
would start Terraform once per shard (a fifth of a second each with the bundled engine), and the
inventory plugin, which knows only the state directory, needs no engine or CLI configuration.
The table is Terraform's, so it is only ever read here, never written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg import sql

from orchestrator import durable
from orchestrator.clients.ansible.inventory import ShardDir, StateReader, local_state
from orchestrator.errors import ConfigError, RetryableError
from orchestrator.workspace.pgbackend import BACKEND_TF, schema_name
from orchestrator.workspace.pgconn import PG_CONN_ENV, redact

CONNECT_TIMEOUT = 10  # seconds: a database that does not answer is reported, not waited for


class StateRows:
    """A :data:`StateReader` for both backends; the database connection is opened on the first pg shard."""

    def __init__(self, conn_str: str | None) -> None:
        self.conn_str = conn_str
        self._conn: psycopg.Connection[Any] | None = None

    def __call__(self, shard: ShardDir) -> Mapping[str, Any] | None:
        if not (shard.path / BACKEND_TF).is_file():
            return local_state(shard)
        if not self.conn_str:
            raise ConfigError(
                [f"{shard.path}: its Terraform state is in PostgreSQL (backend pg): set ${PG_CONN_ENV} to read it"]
            )
        return self.read_schema(schema_name(shard.cluster, shard.provider, shard.index), str(shard.path))

    def read_schema(self, schema: str, label: str) -> Mapping[str, Any] | None:
        """The state Terraform keeps in ``schema`` (None when there is none); ``label`` names it in errors."""
        query = sql.SQL("SELECT data FROM {}.states WHERE name = 'default'").format(sql.Identifier(schema))
        try:
            with self._connection().cursor() as cursor:
                row = cursor.execute(query).fetchone()
        except psycopg.errors.UndefinedTable:
            return None  # a shard never initialised against the database yet: no state
        except psycopg.Error as exc:
            raise RetryableError(f"PostgreSQL: reading the state of {label} failed: {self._said(exc)}") from None
        if row is None or not row[0]:
            return None
        try:
            state = durable.parse_json(str(row[0]))
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            assert self.conn_str is not None
            try:
                # Autocommit: a failed read (a schema not made yet) must not spoil the next one.
                self._conn = psycopg.connect(self.conn_str, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
            except psycopg.Error as exc:
                raise RetryableError(
                    f"PostgreSQL: cannot connect to read Terraform states: {self._said(exc)}"
                ) from None
        return self._conn

    def _said(self, exc: BaseException) -> str:
        """The error in one line, without the connection string or its password."""
        return " ".join(redact(str(exc), self.conn_str).split())[:300]

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@contextlib.contextmanager
def state_reader(conn_str: str | None) -> Iterator[StateReader]:
    """A reader of every shard's state for the block (``conn_str``: the pg site's, else None)."""
    rows = StateRows(conn_str)
    try:
        yield rows
    finally:
        rows.close()
