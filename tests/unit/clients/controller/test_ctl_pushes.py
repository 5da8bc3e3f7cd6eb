"""The push queue is bounded: the newest demand snapshot wins, host events are never lost silently,
and a revocation gets through even while the push thread is stuck."""

from __future__ import annotations

import threading

import pytest
from ctlfake import FakeController, Pki, record_joins, wait_for

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.pushes import PushQueue
from orchestrator.clients.controller.types import DemandSnapshot, HostEvent, HostInfo, LeaseRevoked
from orchestrator.model.config import ControllerSettings


def snap(seq: int, term: int = 1) -> DemandSnapshot:
    return DemandSnapshot(seq=seq, term=term)


def event(n: int) -> HostEvent:
    return HostEvent("joined", HostInfo(f"h{n}", "idle"))


def test_only_the_newest_demand_snapshot_waits() -> None:
    q = PushQueue(max_host_events=4)
    for seq in range(1, 1001):
        q.put_demand(snap(seq))
    q.put_demand(snap(7))  # older than the waiting one: dropped
    assert q.waiting() == (snap(1000), 0)
    q.put_demand(snap(1, term=2))  # a new term is newer whatever its seq
    assert q.get(0) == snap(1, term=2)
    assert q.get(0) is None


def test_host_events_are_bounded_and_refused_when_full() -> None:
    q = PushQueue(max_host_events=3)
    assert [q.put_host_event(event(n)) for n in range(4)] == [True, True, True, False]
    q.put_demand(snap(5))
    assert q.get(0) == snap(5)  # the demand picture first, then events in order
    assert [q.get(0) for _ in range(3)] == [event(0), event(1), event(2)]
    q.close()
    assert q.get() is None


def test_max_host_events_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_host_events"):
        PushQueue(0)


def test_a_stuck_consumer_keeps_the_newest_snapshot_and_revocations_get_through(fake: FakeController, pki: Pki) -> None:
    conns = record_joins(fake)
    release = threading.Event()
    got: list[int] = []
    revoked: list[LeaseRevoked] = []

    def on_demand(s: DemandSnapshot) -> None:
        got.append(s.seq)
        release.wait(30)  # the consumer is stuck until the test lets it go

    settings = ControllerSettings(addresses=[fake.address], ca=pki.ca, request_timeout=5.0)
    with ControllerLink(settings, instance_id="a") as link:
        link.on_demand(on_demand)
        link.on_lease_revoked(revoked.append)
        link.open()
        conn = conns[0]
        conn.push("demand", {"seq": 10, "term": 1})
        assert wait_for(lambda: got == [10])  # taken by the consumer, which is now stuck
        for seq in range(11, 511):
            conn.push("demand", {"seq": seq, "term": 1, "templates": [{"template": "cpu", "wanted": seq}]})
        conn.push("leaseRevoked", {"provider": "p1", "epoch": {"term": 1, "seq": 3}, "reason": "admin"})
        assert wait_for(lambda: len(revoked) == 1)  # not behind the stuck consumer
        assert wait_for(lambda: (w := link.pushes_waiting()[0]) is not None and w.seq == 510)
        assert link.pushes_waiting()[1] == 0
        release.set()
        assert wait_for(lambda: got[-1:] == [510])
    assert got == [10, 510]
    assert revoked[0].provider == "p1"
    newest = link.demand()
    assert newest is not None and newest.seq == 510 and newest.templates[0].wanted == 510


def test_host_event_overflow_drops_the_connection_and_resyncs(fake: FakeController, pki: Pki) -> None:
    conns = record_joins(fake)
    release = threading.Event()
    events: list[str] = []
    reconnected = threading.Event()

    def on_event(e: HostEvent) -> None:
        events.append(e.host.host_name)
        release.wait(30)

    settings = ControllerSettings(addresses=[fake.address], ca=pki.ca, request_timeout=5.0)
    link = ControllerLink(settings, instance_id="a", providers=["p1"], max_host_events=5)
    link.on_host_event(on_event)
    link.on_reconnect(lambda s: reconnected.set() if s.reconnects == 1 else None)
    link.start()
    try:
        assert wait_for(lambda: bool(conns) and link.state().connected)
        # The first join's resync must be over before the overflow: on a loaded machine it may
        # still be asking, and a drop in the middle of it leaves one hostStatus fewer.
        assert wait_for(lambda: fake.seen.count("hostStatus") >= 1)
        conn = conns[0]
        conn.push("hostEvent", {"kind": "joined", "host": {"hostName": "h0", "state": "idle"}})
        assert wait_for(lambda: events == ["h0"])  # the consumer is stuck on h0
        for n in range(1, 10):
            try:
                conn.push("hostEvent", {"kind": "joined", "host": {"hostName": f"h{n}", "state": "idle"}})
            except OSError:  # ssl.SSLError is an OSError: the link already dropped this connection
                break
        # The sixth waiting event does not fit: the link drops the connection and rejoins,
        # and the resync brings the hosts back from hostStatus.
        assert reconnected.wait(20)
        # The resync's hostStatus follows the rejoin (the reconnect callback may run first).
        assert wait_for(lambda: fake.seen.count("hostStatus") >= 2)
        assert wait_for(lambda: bool(link.hosts()) and link.hosts()[0].host_name == "cpu-1")
        release.set()
        assert wait_for(lambda: len(events) == 6)
    finally:
        release.set()
        link.close()
    assert events == [f"h{n}" for n in range(6)]  # what was queued is still delivered, in order
