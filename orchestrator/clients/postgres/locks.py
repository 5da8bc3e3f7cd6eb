"""Session-level PostgreSQL advisory locks under names of one cluster (the daemons' scale-out lock).

A name is locked with ``pg_try_advisory_lock``, its 64-bit key from
``sha256('xceprov/<cluster>/<name>')``. These locks are not a fence for cloud mutations: they die
with the server's session (a restart frees them at once), so the standalone fence is a lease
row with an expiry instead (``standalone.py``). The locks live on a dedicated
connection and die with it (server restart, network cut, process killed), so a lock is only as
good as its connection: :meth:`ProviderLocks.alive` asks the server (bounded like every call,
``session.py``, ``watchdog.py``), and once the connection is lost every lock counts as lost: only a
new :meth:`ProviderLocks.try_lock` (on a new connection) holds it again.
"""

from __future__ import annotations

import contextlib
import threading

import psycopg

from orchestrator.clients.postgres.migrations import advisory_key
from orchestrator.clients.postgres.session import CLIENT_MARGIN, STATEMENT_TIMEOUT, Connection, connect, failed
from orchestrator.clients.postgres.watchdog import bounded


def provider_key(cluster: str, provider: str) -> int:
    """The advisory-lock key of one provider of one cluster."""
    return advisory_key(f"xceprov/{cluster}/{provider}")


class ProviderLocks:
    """Advisory locks of one cluster's providers, held on one connection until :meth:`close`."""

    def __init__(
        self, conn_str: str, cluster: str, *, connect_timeout: float = 5.0, statement_timeout: float = STATEMENT_TIMEOUT
    ) -> None:
        self.conn_str = conn_str
        self.cluster = cluster
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._held: set[str] = set()

    def _drop(self) -> None:
        """Forget the connection and with it every lock (the server released them)."""
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: closing only frees the socket
                self._conn.close()
        self._conn = None
        self._held.clear()

    def _answers(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._drop()
            return False
        try:
            with bounded(self._conn, self.statement_timeout + CLIENT_MARGIN):
                self._conn.execute("SELECT 1").fetchone()
        except psycopg.Error:
            self._drop()
            return False
        return True

    def try_lock(self, provider: str) -> bool:
        """Take ``provider``'s lock without waiting: True when this object holds it (now or
        already), False when another session does; ``StoreUnavailable`` when the server fails."""
        with self._lock:
            if provider in self._held and self._answers():
                return True
            if self._conn is None or self._conn.closed:
                self._drop()
                self._conn = connect(self.conn_str, self.connect_timeout, self.statement_timeout)
            key = provider_key(self.cluster, provider)
            try:
                with bounded(self._conn, self.statement_timeout + CLIENT_MARGIN) as watchdog:
                    row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            except psycopg.Error as exc:
                self._drop()
                bound = watchdog.seconds if watchdog.fired else None
                raise failed(f"locking provider {provider!r}", exc, self.conn_str, no_answer_within=bound) from None
            got = row is not None and row[0] is True
            if got:
                self._held.add(provider)
            return got

    def holds(self, provider: str) -> bool:
        """Whether ``provider``'s lock is held now: taken by this object and its connection alive."""
        with self._lock:
            return provider in self._held and self._answers()

    def alive(self) -> bool:
        """Whether the locks' connection answers now; False (and every lock lost) when it does not."""
        with self._lock:
            return self._answers()

    def unlock(self, provider: str) -> None:
        """Release ``provider``'s lock (nothing when not held; a lost connection released it already)."""
        with self._lock:
            if provider not in self._held or self._conn is None:
                return
            self._held.discard(provider)
            try:
                with bounded(self._conn, self.statement_timeout + CLIENT_MARGIN):
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (provider_key(self.cluster, provider),))
            except psycopg.Error:
                self._drop()  # the connection is gone, and with it the lock

    def close(self) -> None:
        """Release every lock and close the connection. The locks are released by a statement
        first: the server frees a closed session's locks only when its backend has exited,
        a moment after the close, and a successor asking at once must find them free."""
        with self._lock:
            if self._conn is not None and not self._conn.closed:
                with (
                    contextlib.suppress(psycopg.Error),  # a broken connection has released them already
                    bounded(self._conn, self.statement_timeout + CLIENT_MARGIN),
                ):
                    self._conn.execute("SELECT pg_advisory_unlock_all()")
            self._drop()
