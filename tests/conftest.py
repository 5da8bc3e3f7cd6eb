"""Fixtures every test directory shares: one throw-away PostgreSQL server per test module.

``server`` starts the module's server (tests/pg_server.py; skipped with the reason when none
can start here); ``conn_str`` is a fresh database of the test's own, also in ``PG_CONN_STR`` for
every command the test runs (and for the test itself). A directory may override either.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg_server import PgServer, pg_server
from tests.unit.clients.postgres.pg_helpers import fresh_database


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    """The module's throw-away server."""
    with pg_server() as s:
        yield s


@pytest.fixture
def conn_str(server: PgServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database of the test's own, in ``PG_CONN_STR``."""
    conn = fresh_database(server)
    monkeypatch.setenv("PG_CONN_STR", conn)
    return conn


@pytest.fixture(autouse=True)
def _no_secret_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test registers (reading a connection string does) are its own."""
    from orchestrator.model import redaction

    monkeypatch.setattr(redaction, "_known", [])
