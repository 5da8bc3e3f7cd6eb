"""The schema ``xceprov``: versioned migrations applied once, under a lock, newer versions refused."""

from __future__ import annotations

import threading

import pytest

from orchestrator.clients.postgres import SharedStore
from orchestrator.clients.postgres.migrations import LATEST, MIGRATIONS
from orchestrator.errors import FinalError
from orchestrator.model.facts import Epoch
from tests.pg_server import PgServer
from tests.unit.clients.postgres.pg_helpers import fresh_database, sql

TABLES = ["documents", "facts", "fences", "members", "migrations", "standalone_leases"]


def tables(conn_str: str) -> list[str]:
    rows = sql(conn_str, "SELECT tablename FROM pg_tables WHERE schemaname = 'xceprov' ORDER BY tablename")
    return [str(name) for (name,) in rows]


def test_open_creates_the_schema_and_records_each_migration_once(conn_str: str) -> None:
    SharedStore.open(conn_str, "c1").close()
    recorded = sql(conn_str, "SELECT version, name, applied_at FROM xceprov.migrations ORDER BY version")
    assert [(v, n) for v, n, _ in recorded] == [(v, n) for v, n, _ in MIGRATIONS]
    assert tables(conn_str) == TABLES

    SharedStore.open(conn_str, "c1").close()  # idempotent: nothing applied again
    SharedStore.open(conn_str, "c2").close()  # another cluster shares the schema
    assert sql(conn_str, "SELECT version, name, applied_at FROM xceprov.migrations ORDER BY version") == recorded


def test_opens_at_once_on_an_empty_database_all_succeed(server: PgServer) -> None:
    conn_str = fresh_database(server)
    start = threading.Barrier(6)
    failures: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            SharedStore.open(conn_str, "c1").close()
        except BaseException as exc:  # collected for the assert below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sql(conn_str, "SELECT count(*), max(version) FROM xceprov.migrations") == [(len(MIGRATIONS), LATEST)]
    assert tables(conn_str) == TABLES


def test_a_schema_newer_than_the_toolkit_is_refused_with_one_line_and_left_alone(conn_str: str) -> None:
    SharedStore.open(conn_str, "c1").close()
    sql(conn_str, "INSERT INTO xceprov.migrations (version, name) VALUES (%s, 'from the future')", (LATEST + 1,))
    before = sql(conn_str, "SELECT version, name, applied_at FROM xceprov.migrations ORDER BY version")

    with pytest.raises(FinalError) as refused:
        SharedStore.open(conn_str, "c1")
    message = str(refused.value)
    assert "\n" not in message
    assert f"version {LATEST + 1}" in message and f"({LATEST})" in message and "upgrade the toolkit" in message
    assert sql(conn_str, "SELECT version, name, applied_at FROM xceprov.migrations ORDER BY version") == before
    assert tables(conn_str) == TABLES


def test_a_role_that_cannot_create_schemas_opens_a_migrated_database(conn_str: str) -> None:
    SharedStore.open(conn_str, "c1").close()  # the first open, by a role that may create
    sql(conn_str, "CREATE ROLE daemon_role LOGIN")
    sql(conn_str, "GRANT USAGE ON SCHEMA xceprov TO daemon_role")
    sql(conn_str, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA xceprov TO daemon_role")
    daemon_conn_str = conn_str.replace(f"user={sql(conn_str, 'SELECT current_user')[0][0]}", "user=daemon_role")
    assert sql(daemon_conn_str, "SELECT has_database_privilege(current_database(), 'CREATE')") == [(False,)]

    store = SharedStore.open(daemon_conn_str, "c1")
    try:
        store.write_document("p1", "a", b"by the daemon's role", Epoch(1, 1))
        assert store.read_document("p1", "a") == b"by the daemon's role"
    finally:
        store.close()
