"""The one way from a configuration to the shared store (``terraform.backend: pg``).

:func:`pg_site` reads the connection string (:mod:`.pgconn`: from ``$PG_CONN_STR`` or
``terraform.pg_conn_file``, ``ConfigError`` when there is none) and gives the cluster's
:class:`PgSite`, None with ``terraform.backend: local``. Everything of the toolkit's schema
``xceprov`` is opened through it: the store of documents, members and the fact journal (a
connection per caller that asks, :meth:`PgSite.open_store`; the process's shared one is
``sharedstore.store_for``), the standalone lease rows, the advisory locks, the schema check and
the probe of a failed Terraform command: the timeouts a caller may choose, and the rule that
the connection string is never shown (not even in a ``repr``), are here once.
Terraform's own tables are read by :mod:`.tfstates`, which the inventory plugin uses without a
configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.clients.postgres import ProviderLocks, SharedStore, StandaloneLeases, check_schema, unreachable
from orchestrator.clients.postgres.session import STATEMENT_TIMEOUT
from orchestrator.model.config import Config
from orchestrator.workspace.pgconn import pg_conn_str

CONNECT_TIMEOUT = 5.0  # seconds, unless the caller says otherwise: an outage is reported, not waited out


@dataclass(frozen=True)
class PgSite:
    """The database of one cluster's ``terraform.backend: pg``; each method opens what it names
    on a connection of its own (``StoreUnavailable`` when the server cannot be reached)."""

    conn_str: str = field(repr=False)  # holds the password: never in a message, a log or a repr
    cluster: str

    def open_store(
        self, *, connect_timeout: float = CONNECT_TIMEOUT, statement_timeout: float = STATEMENT_TIMEOUT
    ) -> SharedStore:
        """The shared store, connected and migrated (``SharedStore.open``)."""
        return SharedStore.open(
            self.conn_str, self.cluster, connect_timeout=connect_timeout, statement_timeout=statement_timeout
        )

    def standalone_leases(
        self, *, connect_timeout: float = CONNECT_TIMEOUT, statement_timeout: float = STATEMENT_TIMEOUT
    ) -> StandaloneLeases:
        """The standalone lease rows (connected at their first use)."""
        return StandaloneLeases(
            self.conn_str, self.cluster, connect_timeout=connect_timeout, statement_timeout=statement_timeout
        )

    def provider_locks(self) -> ProviderLocks:
        """The session advisory locks (connected at their first use)."""
        return ProviderLocks(self.conn_str, self.cluster)

    def schema_version(self) -> int:
        """The version of the store's schema, read without changing anything (``check_schema``)."""
        return check_schema(self.conn_str)

    def unreachable(self) -> str | None:
        """Why the server cannot be reached now (one line, redacted), None when it answers."""
        return unreachable(self.conn_str)


def pg_site(config: Config, environ: Mapping[str, str] = os.environ) -> PgSite | None:
    """The cluster's database with ``terraform.backend: pg``; None with ``local``. ``ConfigError``
    when the connection string is missing or unreadable (one line, never the string)."""
    conn_str = pg_conn_str(config, environ)
    return None if conn_str is None else PgSite(conn_str, config.cluster)
