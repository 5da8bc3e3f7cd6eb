"""The states Terraform's ``pg`` backend keeps: read, never written (the tables are Terraform's).

Terraform keeps a shard's state as the row ``default`` of ``<schema>.states``. One connection
serves every shard of a site (a ``terraform state pull`` per shard would start Terraform once
each), in autocommit mode so that a failed read (a schema not made yet) does not spoil the next.
Who reads them, and why not with Terraform: ``orchestrator/workspace/tfstates.py``.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from psycopg import sql

from orchestrator.clients.postgres.redact import redact
from orchestrator.errors import RetryableError

CONNECT_TIMEOUT: Final = 10  # seconds: a database that does not answer is reported, not waited for


class TerraformStates:
    """One connection to the database of Terraform's pg backend, opened at the first read."""

    def __init__(self, conn_str: str, connect_timeout: int = CONNECT_TIMEOUT) -> None:
        self._conn_str = conn_str
        self._timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

    def state_text(self, schema: str, label: str) -> str | None:
        """The state JSON Terraform keeps in ``schema`` as text; None when there is none (no row,
        an empty one, or a schema never initialised against the database). ``label`` names the
        state in errors: ``RetryableError`` when the database fails the read."""
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
        return str(row[0])

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            try:
                self._conn = psycopg.connect(self._conn_str, connect_timeout=self._timeout, autocommit=True)
            except psycopg.Error as exc:
                raise RetryableError(
                    f"PostgreSQL: cannot connect to read Terraform states: {self._said(exc)}"
                ) from None
        return self._conn

    def _said(self, exc: BaseException) -> str:
        """The error in one line, without the connection string or its password."""
        return " ".join(redact(str(exc), self._conn_str).split())[:300]

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
