"""Members of the shared store: heartbeats by the server's clock, live or stale, leave."""

from __future__ import annotations

from orchestrator.clients.postgres import SharedStore
from tests.unit.clients.postgres.pg_helpers import sql


def age_heartbeat(conn_str: str, instance: str, seconds: int) -> None:
    """Make ``instance``'s last heartbeat ``seconds`` old (as if it had stopped then)."""
    sql(
        conn_str,
        "UPDATE xceprov.members SET heartbeat_at = clock_timestamp() - make_interval(secs => %s) WHERE instance = %s",
        (seconds, instance),
    )


def test_a_heartbeat_makes_a_live_member_with_what_it_holds(store: SharedStore) -> None:
    store.heartbeat("orch-b", "node2", ["p2", "p1"], {"p1": "7.3"})
    store.heartbeat("orch-a", "node1", ("p1", "p2"), {})
    members = store.members(live_within=30)
    assert [m.instance for m in members] == ["orch-a", "orch-b"]  # sorted by instance id
    b = members[1]
    assert (b.label, b.configured, b.held) == ("node2", ("p1", "p2"), {"p1": "7.3"})
    assert 0 <= b.age_s < 30

    store.heartbeat("orch-b", "node2", ["p2"], {"p2": "7.4"})  # the row is replaced, not added
    assert [(m.instance, m.configured, m.held) for m in store.members(30)] == [
        ("orch-a", ("p1", "p2"), {}),
        ("orch-b", ("p2",), {"p2": "7.4"}),
    ]


def test_a_member_whose_heartbeat_is_older_than_live_within_is_not_live(store: SharedStore, conn_str: str) -> None:
    store.heartbeat("orch-a", "node1", ["p1"], {})
    store.heartbeat("orch-b", "node2", ["p1"], {"p1": "1.1"})
    age_heartbeat(conn_str, "orch-b", 120)

    assert [m.instance for m in store.members(live_within=60)] == ["orch-a"]
    stale = [m for m in store.members(live_within=600) if m.instance == "orch-b"]
    assert len(stale) == 1 and 120 <= stale[0].age_s < 600  # the age is the server's

    store.heartbeat("orch-b", "node2", ["p1"], {})  # it came back
    assert [m.instance for m in store.members(live_within=60)] == ["orch-a", "orch-b"]


def test_leave_removes_the_member_at_once(store: SharedStore, conn_str: str) -> None:
    store.heartbeat("orch-a", "node1", ["p1"], {"p1": "1.1"})
    store.heartbeat("orch-b", "node2", ["p1"], {})
    store.leave("orch-a")
    assert [m.instance for m in store.members(live_within=3600)] == ["orch-b"]
    assert sql(conn_str, "SELECT instance FROM xceprov.members") == [("orch-b",)]
    store.leave("orch-a")  # already gone: nothing to do


def test_members_of_another_cluster_are_not_seen(store: SharedStore, conn_str: str) -> None:
    other = SharedStore.open(conn_str, "c2")
    try:
        store.heartbeat("orch-a", "node1", ["p1"], {})
        other.heartbeat("orch-a", "node9", ["p9"], {"p9": "2.2"})
        assert [(m.label, m.configured, m.held) for m in store.members(60)] == [("node1", ("p1",), {})]
        assert [(m.label, m.held) for m in other.members(60)] == [("node9", {"p9": "2.2"})]
        other.leave("orch-a")
        assert [m.label for m in store.members(60)] == ["node1"]
    finally:
        other.close()


def test_a_killed_members_row_is_removed_by_a_later_heartbeat_or_clean_stop(store: SharedStore, conn_str: str) -> None:
    """A daemon killed with ``kill -9`` never leaves: its row goes once it is a minute past its
    live window, at the next heartbeat or clean stop of any member of the cluster."""
    store.heartbeat("killed", "node1", ["p1"], {"p1": "3.1"}, live_for=10)
    store.heartbeat("recent", "node2", ["p1"], {}, live_for=10)
    store.heartbeat("alive", "node3", ["p1"], {}, live_for=10)
    age_heartbeat(conn_str, "killed", 71)  # its live window (10 s) and a minute past it
    age_heartbeat(conn_str, "recent", 50)  # gone from the live members, not yet expired
    store.heartbeat("alive", "node3", ["p1"], {}, live_for=10)
    rows = sql(conn_str, "SELECT instance FROM xceprov.members ORDER BY instance")
    assert rows == [("alive",), ("recent",)]

    age_heartbeat(conn_str, "recent", 71)
    store.leave("alive")  # a clean stop
    assert sql(conn_str, "SELECT instance FROM xceprov.members") == []
