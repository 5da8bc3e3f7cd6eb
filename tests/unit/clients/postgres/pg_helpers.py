"""Helpers of the shared-store tests: plain SQL as the server's superuser, fresh databases."""

from __future__ import annotations

import itertools
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
