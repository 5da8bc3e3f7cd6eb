"""Helpers of the shared-store tests: plain SQL as the server's superuser, fresh databases."""

from __future__ import annotations

import itertools
import time
from typing import Any

import psycopg

from tests.pg_server import DATABASE, PgServer

_names = itertools.count()


def sql(conn_str: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on its own connection (autocommit) and return its rows."""
    with psycopg.connect(conn_str, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def fresh_database(server: PgServer) -> str:
    """A new empty database on ``server``; its connection string."""
    name = f"fresh{next(_names)}"
    sql(server.conn_str, f"CREATE DATABASE {name}")
    return server.conn_str.replace(f"/{DATABASE}?", f"/{name}?")


def wait_until_no_advisory_lock(conn_str: str) -> None:
    """Wait until terminated sessions have exited (termination is a signal; the exit follows)."""
    deadline = time.monotonic() + 60
    while sql(conn_str, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") != [(0,)]:
        assert time.monotonic() < deadline, "a terminated session kept its advisory lock"
        time.sleep(0.05)
