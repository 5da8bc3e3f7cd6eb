"""The daemon's heartbeat in the shared store, its share, and the fence the store's outage closes."""

from __future__ import annotations

import pytest

from orchestrator.daemon.fence import StoreFence
from orchestrator.daemon.members import Membership
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch
from tests.unit.daemon.memberfake import FakeStore

TTL = 15.0
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Leases:
    def gate(self, provider: str) -> Epoch:
        return Epoch(3, 1)

    def valid(self, provider: str) -> bool:
        return True


def member(store: FakeStore, clock: Clock, changes: list[int] | None = None) -> Membership:
    return Membership(
        store,
        instance="me",
        label="c1-daemon-m1",
        configured=["p1", "p2", "p3", "p4"],
        held=lambda: {"p1": "3.1"},
        ttl=lambda: TTL,
        interval=lambda: TTL / 3,
        on_change=lambda: changes.append(1) if changes is not None else None,
        wall=clock,
        monotonic=clock,
    )


def test_a_heartbeat_writes_the_row_and_deals_the_share_among_live_members() -> None:
    clock = Clock()
    store = FakeStore(clock)
    store.put("other", ["p1", "p2", "p3", "p4"])
    store.put("gone", ["p1", "p2", "p3", "p4"])
    mine = member(store, clock)
    assert mine.dealt() is None and mine.closed_reason() == "no heartbeat in the shared store yet"
    clock.now += 5.0
    store.put("other", ["p1", "p2", "p3", "p4"])  # "gone" has not beaten for 2 TTL/3 by the next read
    clock.now += 2 * TTL / 3 - 5.0
    assert mine.beat()
    assert store.rows["me"][:3] == ("c1-daemon-m1", ("p1", "p2", "p3", "p4"), {"p1": "3.1"})
    # Live: me and other ("gone" stopped beating two heartbeat intervals ago): two each, by rank.
    assert mine.dealt() == {"p1", "p3"} and mine.closed_reason() is None
    doc = mine.to_json()
    assert doc["reachable"] and doc["dealt"] == ["p1", "p3"]
    assert [(m["instance"], m["held"]) for m in doc["members"]] == [("me", {"p1": "3.1"}), ("other", {})]


def test_the_store_down_closes_the_fence_for_every_provider_and_its_return_reopens_it() -> None:
    clock = Clock()
    store = FakeStore(clock)
    changes: list[int] = []
    mine = member(store, clock, changes)
    fence = StoreFence(Leases(), mine.closed_reason)
    assert mine.beat() and fence.gate("p1") == Epoch(3, 1) and fence.valid("p2")
    version = mine.version()
    store.down = "connection to server on socket failed: No such file or directory"
    clock.now += 5.0
    assert not mine.beat()
    assert len(changes) == 2 and mine.version() > version  # the loop is woken: a pass writes the status
    for provider in ("p1", "p2"):
        assert not fence.valid(provider)
        with pytest.raises(LeaseLost) as caught:
            fence.gate(provider)
        assert str(caught.value) == (
            f"provider {provider!r}: shared store unreachable since 2027-01-15T08:00:05Z: "
            "connection to server on socket failed: No such file or directory: no mutation until it answers"
        )
    clock.now += 30.0
    assert not mine.beat()  # still down: the time of the first failure stays
    doc = mine.to_json()
    assert doc["reachable"] is False and doc["unreachable_since"] == T0 + 5.0
    assert doc["closed"].startswith("shared store unreachable since 2027-01-15T08:00:05Z")
    assert doc["dealt"] == ["p1", "p2", "p3", "p4"]  # the last share stays: nothing is re-dealt blind
    store.down = ""
    assert mine.beat()
    assert fence.valid("p1") and fence.gate("p3") == Epoch(3, 1) and mine.to_json()["reachable"]


def test_a_heartbeat_that_stops_succeeding_closes_the_fence_after_two_missed_heartbeats() -> None:
    # A heartbeat stuck (a thread that hangs on the database) says nothing failed, but the others
    # count this daemon as gone once its row is two heartbeat intervals (2 TTL/3) old: it must not
    # act on its share.
    clock = Clock()
    mine = member(FakeStore(clock), clock)
    assert mine.beat()
    clock.now += 2 * TTL / 3 - 0.5
    assert mine.closed_reason() is None
    clock.now += 0.5
    assert mine.closed_reason() == (
        "no heartbeat in the shared store for 10s (the other daemons count this one as gone)"
    )


def test_a_member_that_missed_two_heartbeats_is_dealt_out_before_its_leases_lapse() -> None:
    # Its leases lapse one TTL after their last renewal; dealing its providers out after two
    # missed heartbeats (2 TTL/3) has the survivors asking before then. One missed heartbeat
    # (a slow beat) keeps it in the deal.
    clock = Clock()
    store = FakeStore(clock)
    store.put("a-dead", ["p1", "p2", "p3", "p4"])  # ranks before "me": p1 and p3 are its own
    mine = member(store, clock)
    assert mine.beat() and mine.dealt() == {"p2", "p4"}
    clock.now += TTL / 3 + 1.0  # one heartbeat missed
    assert mine.beat() and mine.dealt() == {"p2", "p4"}
    clock.now += TTL / 3  # the second one missed: 2 TTL/3 + 1 s since its last, before one TTL
    assert mine.beat() and mine.dealt() == {"p1", "p2", "p3", "p4"}
    assert [m["instance"] for m in mine.to_json()["members"]] == ["me"]


def test_what_the_others_hold_changing_changes_the_version() -> None:
    clock = Clock()
    store = FakeStore(clock)
    store.put("other", ["p1"], {"p1": "3.4"})
    mine = member(store, clock)
    mine.beat()
    before = mine.version()
    mine.beat()
    assert mine.version() == before  # nothing changed
    store.put("other", ["p1"], {})  # it released p1: the daemon asks again at once
    mine.beat()
    assert mine.version() == before + 1


def test_stop_leaves_at_once_and_closes_the_store() -> None:
    clock = Clock()
    store = FakeStore(clock)
    mine = member(store, clock)
    mine.start()
    mine.stop(leave=True)
    assert "me" not in store.rows and store.calls[-2:] == ["leave", "close"]
    # A store down at the stop: the row ages out; the stop goes on.
    store.down = "gone"
    mine.stop(leave=True)
    assert store.calls[-1] == "close"
