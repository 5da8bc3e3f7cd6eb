"""The daemon's heartbeat on a real throw-away PostgreSQL: two members split four providers; a
database that stops closes the fence and its return reopens it; a daemon started while the
database is down joins when it answers; the scale-out lock is one daemon's at a time."""

from __future__ import annotations

import pytest

from orchestrator.daemon.members import DedicatedStore, Membership
from orchestrator.daemon.parts import default_member_store
from orchestrator.daemon.scaleoutlock import SharedScaleOutLock, scale_out_lock
from orchestrator.model.config import Config
from orchestrator.workspace.pgsite import PgSite
from tests.pg_server import PgServer
from tests.unit.clients.postgres.pg_helpers import fresh_database

FOUR = ["p1", "p2", "p3", "p4"]


def member(conn_str: str, instance: str) -> Membership:
    return Membership(
        DedicatedStore(PgSite(conn_str, "c1"), connect_timeout=2.0),
        instance=instance,
        label=f"label-{instance}",
        configured=FOUR,
        held=dict,
        ttl=lambda: 30.0,
        interval=lambda: 10.0,
    )


def test_two_members_split_four_providers_and_the_outage_closes_then_reopens(server: PgServer) -> None:
    conn_str = fresh_database(server)
    a, b, late = member(conn_str, "a"), member(conn_str, "b"), member(conn_str, "c")
    try:
        assert a.beat() and b.beat() and a.beat()
        assert (a.dealt(), b.dealt()) == ({"p1", "p3"}, {"p2", "p4"})
        server.stop()
        try:
            assert not a.beat()
            reason = a.closed_reason()
            assert reason is not None and reason.startswith("shared store unreachable since ")
            assert "@" not in reason and "password" not in reason  # never the connection string
            assert not late.beat() and late.dealt() is None  # c starts while the database is down
        finally:
            server.start()
        # Back: the first heartbeat after the restart reopens the fence (a new connection).
        assert a.beat() and a.closed_reason() is None
        assert late.beat() and b.beat() and a.beat()
        # Three live now: a keeps p1 and gets p4, b keeps p2, c takes p3 (by rank).
        assert (a.dealt(), b.dealt(), late.dealt()) == ({"p1", "p4"}, {"p2"}, {"p3"})
        late.stop(leave=True)
        assert a.beat() and a.dealt() == {"p1", "p3"}  # c left: dealt out at once, no TTL to wait
    finally:
        for m in (a, b, late):
            m.stop(leave=True)


def test_the_default_store_is_none_with_the_local_backend_and_dedicated_with_pg(
    server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = Config.model_validate({"cluster": "c1", "providers": {}, "templates": {}})
    assert default_member_store(local) is None
    monkeypatch.setenv("PG_CONN_STR", fresh_database(server))
    pg = local.model_copy(update={"terraform": local.terraform.model_copy(update={"backend": "pg"})})
    store = default_member_store(pg)
    assert isinstance(store, DedicatedStore)
    store.heartbeat("x", "label-x", ["p1"], {})
    assert [m.instance for m in store.members(30)] == ["x"]
    store.leave("x")
    store.close()


def test_the_scale_out_lock_is_one_daemon_s_at_a_time_and_dies_with_its_connection(server: PgServer) -> None:
    conn_str = fresh_database(server)
    first, second = SharedScaleOutLock(PgSite(conn_str, "c1")), SharedScaleOutLock(PgSite(conn_str, "c1"))
    other_cluster = SharedScaleOutLock(PgSite(conn_str, "c2"))
    try:
        assert first.try_acquire() and not second.try_acquire()
        assert other_cluster.try_acquire()  # clusters sharing a database decide apart
        first.release()
        assert second.try_acquire() and not first.try_acquire()
        second.close()  # its holder gone (a crash closes the connection too): free at once
        assert first.try_acquire()
    finally:
        for lock in (first, second, other_cluster):
            lock.close()
    local = Config.model_validate({"cluster": "c1", "providers": {}, "templates": {}})
    assert scale_out_lock(local) is None
