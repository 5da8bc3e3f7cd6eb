"""The shared store while its server is down: StoreUnavailable, redacted, and recovery after."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import psycopg
import pytest

from orchestrator.clients.postgres import ProviderLocks, SharedStore
from orchestrator.errors import FinalError, StoreUnavailable
from orchestrator.model.facts import Epoch
from tests.pg_server import PgServer
from tests.unit.clients.postgres.pg_helpers import sql, wait_until_no_advisory_lock

PASSWORD = "Pa55-word-of-the-site"  # trust auth ignores it; it is here to be kept out of messages


@pytest.fixture
def secret_conn_str(server: PgServer) -> str:
    return server.conn_str.replace("user=", f"password={PASSWORD}&user=")


@pytest.fixture
def down(server: PgServer) -> Iterator[PgServer]:
    """The server stopped for the test, started again after it."""
    server.stop()
    try:
        yield server
    finally:
        server.start()


def assert_redacted(message: str, conn_str: str) -> None:
    assert "\n" not in message
    assert PASSWORD not in message and conn_str not in message
    assert "password=" not in message.replace("password=***", "")


def test_open_while_the_server_is_down_is_store_unavailable_without_the_connection_string(
    secret_conn_str: str, down: PgServer
) -> None:
    with pytest.raises(StoreUnavailable) as refused:
        SharedStore.open(secret_conn_str, "c1", connect_timeout=2)
    assert refused.value.exit_code == 75
    assert str(refused.value).startswith("shared store: connect failed: ")
    assert_redacted(str(refused.value), secret_conn_str)


def test_a_malformed_connection_string_is_final_and_redacted(server: PgServer) -> None:
    bad = f"postgresql://xceprov:{PASSWORD}@[::1/xceprov"  # libpq quotes the whole string back
    with pytest.raises(FinalError) as refused:
        SharedStore.open(bad, "c1")
    assert not isinstance(refused.value, StoreUnavailable)
    assert "malformed" in str(refused.value)
    assert_redacted(str(refused.value), bad)


def test_every_call_fails_unavailable_while_down_and_works_again_after(server: PgServer, secret_conn_str: str) -> None:
    store = SharedStore.open(secret_conn_str, "c1", connect_timeout=2)
    try:
        store.write_document("p1", "desired/0", b"before", Epoch(1, 1))
        store.heartbeat("orch-a", "node1", ["p1"], {})
        server.stop()
        try:
            assert store.ping() is False
            calls = [
                lambda: store.read_document("p1", "desired/0"),
                lambda: store.read_documents("p1", "desired/"),
                lambda: store.write_document("p1", "desired/0", b"during", Epoch(1, 1)),
                lambda: store.remove_document("p1", "desired/0", None),
                lambda: store.heartbeat("orch-a", "node1", ["p1"], {}),
                lambda: store.members(60),
                lambda: store.leave("orch-a"),
                lambda: store.append_facts([{"n": 1}]),
                lambda: store.facts_since(0),
            ]
            for call in calls:
                with pytest.raises(StoreUnavailable) as refused:
                    call()
                assert_redacted(str(refused.value), secret_conn_str)
        finally:
            server.start()
        # The same object connects again on its next call; nothing was written meanwhile.
        assert store.ping() is True
        assert store.read_document("p1", "desired/0") == b"before"
        assert store.facts_since(0) == []
        assert [m.instance for m in store.members(3600)] == ["orch-a"]
    finally:
        store.close()


def test_a_connection_cut_under_a_store_fails_one_call_then_reconnects(server: PgServer) -> None:
    store = SharedStore.open(server.conn_str, "c1")
    try:
        store.write_document("", "x", b"1", None)
        server.stop()
        server.start()  # the store's connection died with the old server process
        with pytest.raises(StoreUnavailable):
            store.read_document("", "x")
        assert store.read_document("", "x") == b"1"
    finally:
        store.close()


def test_locks_are_not_alive_while_down_and_held_after_only_by_a_new_try_lock(
    server: PgServer, secret_conn_str: str
) -> None:
    locks = ProviderLocks(secret_conn_str, "c1", connect_timeout=2)
    other = ProviderLocks(server.conn_str, "c1")
    try:
        assert locks.try_lock("p1") is True
        server.stop()
        try:
            assert locks.alive() is False
            assert locks.holds("p1") is False
            with pytest.raises(StoreUnavailable) as refused:
                locks.try_lock("p1")
            assert_redacted(str(refused.value), secret_conn_str)
        finally:
            server.start()
        assert locks.holds("p1") is False  # the restart freed the lock: not held until asked again
        assert other.try_lock("p1") is True
        assert locks.try_lock("p1") is False
        other.close()
        assert locks.try_lock("p1") is True and locks.alive() is True
    finally:
        locks.close()
        other.close()


def store_backends(conn_str: str) -> list[int]:
    """The server processes serving every session but the asking one."""
    rows = sql(
        conn_str,
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )
    return [int(pid) for (pid,) in rows]


@contextlib.contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    """The processes stopped (SIGSTOP) for the block: a server that hangs without closing anything."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_a_write_waiting_on_a_lock_ends_at_the_statement_timeout(server: PgServer) -> None:
    store = SharedStore.open(server.conn_str, "c1", statement_timeout=1)
    try:
        store.write_document("p1", "a", b"before", Epoch(1, 1))
        with psycopg.connect(server.conn_str) as holder:  # a transaction that never ends on its own
            holder.execute("SELECT * FROM xceprov.fences WHERE provider = 'p1' FOR UPDATE")
            with pytest.raises(StoreUnavailable, match="statement timeout"):
                store.write_document("p1", "a", b"blocked", Epoch(1, 1))
            holder.rollback()
        assert store.read_document("p1", "a") == b"before"
    finally:
        store.close()


def test_a_hung_server_fails_the_call_within_the_clients_bound_and_the_next_call_reconnects(
    server: PgServer,
) -> None:
    store = SharedStore.open(server.conn_str, "c1", statement_timeout=1)
    locks = ProviderLocks(server.conn_str, "c1", statement_timeout=1)
    try:
        store.write_document("", "a", b"1", None)
        assert locks.try_lock("p1") is True
        with frozen(store_backends(server.conn_str)):
            with pytest.raises(StoreUnavailable, match=r"no answer within 6 s"):
                store.read_document("", "a")
            assert locks.alive() is False
        wait_until_no_advisory_lock(server.conn_str)  # the thawed session sees its cut socket and exits
        assert store.read_document("", "a") == b"1"
        assert locks.holds("p1") is False
        assert locks.try_lock("p1") is True
    finally:
        store.close()
        locks.close()
