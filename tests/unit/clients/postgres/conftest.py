"""One throw-away PostgreSQL server per test module (tests/pg_server.py), a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.clients.postgres import SharedStore
from tests.pg_server import PgServer
from tests.unit.clients.postgres.pg_helpers import fresh_database


@pytest.fixture
def conn_str(server: PgServer) -> str:
    """A fresh database of its own for one test."""
    return fresh_database(server)


@pytest.fixture
def store(conn_str: str) -> Iterator[SharedStore]:
    """A store of cluster ``c1`` on a fresh database."""
    opened = SharedStore.open(conn_str, "c1")
    yield opened
    opened.close()
