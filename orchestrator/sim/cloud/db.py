"""The cloud store's SQLite file: one connection per thread (and per forked process), short
transactions that take the write lock up front, and the ``meta`` table's keys and counters.

Why ``BEGIN IMMEDIATE`` for every write, WAL and ``busy_timeout``: see ``store.py``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

_BUSY_TIMEOUT_MS: Final = 60_000


class Database:
    """The store's file; each thread (and each forked process) gets its own connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, reopened after a fork)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # A connection must not cross a fork: reopen in the child.
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=True
            )
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a create the provider reported to Terraform must survive a power cut too.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction, taking the write lock up front."""
        conn = self.conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT: never leave the thread's connection inside a transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: a consistent snapshot across several SELECTs."""
        conn = self.conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None


def meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A ``meta`` value (None when unset)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str | None) -> None:
    """Set a ``meta`` value (None removes it)."""
    if value is None:
        conn.execute("DELETE FROM meta WHERE key = ?", (key,))
    else:
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))


def increment(conn: sqlite3.Connection, key: str) -> int:
    """Add one to the counter ``key`` of ``meta`` (``version``, ``draws``) and return the new value."""
    row = conn.execute(
        "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = ? RETURNING value", (key,)
    ).fetchone()
    return int(row[0])
