"""Lease manager rules, driven by a fake clock and a scripted transport (no threads, no network)."""

from __future__ import annotations

import itertools
import random

import pytest

from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.types import Epoch, LeaseDenied, LeaseGrant
from orchestrator.errors import ControllerError, LeaseLost

TTL = 30.0
MARGIN = 2.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeController:
    """Grants to whoever asks first; can be made unreachable or to deny."""

    def __init__(self, clock: FakeClock, latency: float = 0.0) -> None:
        self.clock = clock
        self.latency = latency
        self.up = True
        self.holder: str | None = None
        self.seq = 0
        self.sent: list[tuple[str, float]] = []
        self.released: list[tuple[str, Epoch]] = []
        self.deny_to: str | None = None
        self.holder_named = ""

    def _answer(self, provider: str) -> LeaseGrant | LeaseDenied:
        self.sent.append((provider, self.clock.now))
        if not self.up:
            raise ControllerError("controller unreachable")
        self.clock.now += self.latency
        if self.deny_to:
            return LeaseDenied(provider, self.deny_to, 5.0)
        self.seq += 1
        return LeaseGrant(provider, Epoch(1, self.seq), TTL, self.holder_named)

    def acquire(self, provider: str, previous: Epoch | None) -> LeaseGrant | LeaseDenied:
        return self._answer(provider)

    def renew(self, provider: str, epoch: Epoch) -> LeaseGrant | LeaseDenied:
        return self._answer(provider)

    def release(self, provider: str, epoch: Epoch) -> None:
        self.released.append((provider, epoch))


def make(clock: FakeClock, ctl: FakeController, jitter: float = 0.0) -> LeaseManager:
    return LeaseManager(ctl, ["p1"], margin=MARGIN, clock=clock, rng=random.Random(1), jitter=jitter)


def test_gate_refuses_before_the_first_grant() -> None:
    clock = FakeClock()
    mgr = make(clock, FakeController(clock))
    with pytest.raises(LeaseLost, match="not held"):
        mgr.gate("p1")
    with pytest.raises(LeaseLost, match="no lease is managed"):
        mgr.gate("other")


def test_renews_every_third_of_the_ttl() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl)
    assert mgr.step() == pytest.approx(TTL / 3)
    assert mgr.gate("p1") == Epoch(1, 1)
    for _ in range(5):
        clock.now += mgr.step()
        mgr.step()
    times = [t for _, t in ctl.sent]
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([TTL / 3] * 5)
    assert mgr.gate("p1") == Epoch(1, 6)


def test_jitter_only_makes_renewals_earlier_and_small() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl, jitter=0.05)
    for _ in range(50):
        clock.now += mgr.step()
    times = [t for _, t in ctl.sent]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(TTL / 3 * 0.95 <= g <= TTL / 3 for g in gaps)
    assert len(set(gaps)) > 1


def test_valid_until_counts_from_when_the_request_was_sent() -> None:
    clock = FakeClock()
    ctl = FakeController(clock, latency=4.0)  # the reply takes 4 s to come back
    mgr = make(clock, ctl)
    start = clock.now
    mgr.step()
    ctl.up = False
    # Valid until start + TTL - margin, not (start + 4) + TTL - margin.
    clock.now = start + TTL - MARGIN - 0.001
    mgr.step()  # the renewal fails: the controller is away
    assert mgr.gate("p1") == Epoch(1, 1)
    clock.now = start + TTL - MARGIN
    with pytest.raises(LeaseLost, match="lapsed"):
        mgr.gate("p1")


def test_stops_mutating_before_the_ttl_ends_when_renewals_fail() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl)
    granted_at = clock.now
    mgr.step()
    ctl.up = False
    last_ok = None
    while clock.now < granted_at + TTL + 5:
        clock.now += 0.25
        mgr.step()
        if mgr.valid("p1"):
            last_ok = clock.now
    assert last_ok is not None
    # The holder stopped before the controller's TTL ended, by at least the margin.
    assert last_ok < granted_at + TTL - MARGIN
    # It kept retrying (quickly) while the controller was away.
    assert len(ctl.sent) > 10
    # The controller is back: the next renewal succeeds and the gate opens again.
    ctl.up = True
    clock.now += mgr.step()
    mgr.step()
    assert mgr.valid("p1")


def test_denied_lease_names_the_holder_and_retries_after_the_hint() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    ctl.deny_to = "orch-b"
    mgr = make(clock, ctl)
    assert mgr.step() == pytest.approx(5.0)
    with pytest.raises(LeaseLost, match="held by orch-b"):
        mgr.gate("p1")
    [status] = mgr.status()
    assert not status.held and status.holder == "orch-b"


def test_revocation_invalidates_at_once_and_a_crossing_grant_is_ignored() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl)
    mgr.step()
    epoch = mgr.gate("p1")
    mgr.revoke("p1", epoch)
    with pytest.raises(LeaseLost, match="revoked"):
        mgr.gate("p1")
    # A renewal answer for the revoked epoch that arrives after the push is ignored.
    mgr._answered("p1", LeaseGrant("p1", epoch, TTL), clock.now, clock.now)
    assert not mgr.valid("p1")
    # A later grant with a newer epoch is accepted.
    clock.now += mgr.step()
    mgr.step()
    assert mgr.gate("p1") > epoch


def test_revocation_of_another_epoch_is_ignored() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl)
    mgr.step()
    mgr.revoke("p1", Epoch(0, 99))
    assert mgr.valid("p1")


def test_close_releases_held_leases_only() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = LeaseManager(ctl, ["p1", "p2"], margin=MARGIN, clock=clock)
    mgr.step()
    mgr.revoke("p2")
    mgr.close()
    assert ctl.released == [("p1", Epoch(1, 1))]
    assert not mgr.valid("p1")


def test_a_lease_granted_to_the_identity_alone_is_never_released() -> None:
    # A controller that does not tell processes of one certificate apart names the identity as
    # the holder: the lease may be another process's (a daemon's), so releasing it would free theirs.
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = LeaseManager(ctl, ["p1"], margin=MARGIN, clock=clock, instance="cli.42.ab")
    mgr.step()
    assert mgr.gate("p1") == Epoch(1, 1)  # the grant names "" (no instance): not this process's alone
    mgr.close()
    assert ctl.released == []

    ctl.holder_named = "orch/cli.42.ab"  # granted to this process: released on close
    mine = LeaseManager(ctl, ["p1"], margin=MARGIN, clock=clock, instance="cli.42.ab")
    mine.step()
    mine.close()
    assert ctl.released == [("p1", Epoch(1, 2))]


def test_kick_renews_now() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = make(clock, ctl)
    mgr.step()
    clock.now += 1
    mgr.kick()
    mgr.step()
    assert len(ctl.sent) == 2


def test_threads_renew_and_close_releases() -> None:
    import threading
    import time

    ctl_clock = FakeClock()
    ctl = FakeController(ctl_clock)
    done = threading.Event()
    seen: list[str] = []

    def changed(provider: str) -> None:
        seen.append(provider)
        done.set()

    mgr = LeaseManager(ctl, ["p1"], margin=MARGIN, clock=time.monotonic, on_change=changed)
    mgr.start()
    try:
        assert done.wait(10)
        assert mgr.gate("p1") == Epoch(1, 1)
        record = mgr.record("p1")
        assert record.valid_until == record.renewal_sent + record.ttl - MARGIN
        assert record.renewal_sent <= record.renewal_confirmed
    finally:
        mgr.close()
    assert ctl.released == [("p1", Epoch(1, 1))]
    assert set(seen) == {"p1"}


def test_want_drops_a_held_lease_its_gate_closing_before_the_release() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    order: list[str] = []
    mgr: LeaseManager | None = None

    def changed(provider: str) -> None:
        assert mgr is not None
        order.append(f"{provider} {'valid' if mgr.valid(provider) else 'closed'}")

    mgr = LeaseManager(ctl, ["p1", "p2"], margin=MARGIN, clock=clock, on_change=changed)
    mgr.step()
    assert mgr.valid("p1") and mgr.valid("p2")
    ctl_release = ctl.release

    def release(provider: str, epoch: Epoch) -> None:
        order.append(f"{provider} released")
        ctl_release(provider, epoch)

    ctl.release = release  # type: ignore[method-assign]
    order.clear()
    mgr.want(["p2"])
    assert mgr.wanted() == {"p2"}
    mgr.step()
    # The gate closed (and was published) before the controller heard the release.
    assert order == ["p1 closed", "p1 released"]
    assert ctl.released == [("p1", Epoch(1, 1))]
    with pytest.raises(LeaseLost, match="not asked for: dealt to another instance"):
        mgr.gate("p1")
    assert mgr.record("p1").note == "not asked for: dealt to another instance"
    # Never asked for again, while p2 goes on renewing.
    sent = len(ctl.sent)
    for _ in range(4):
        clock.now += mgr.step()
    assert {p for p, _ in ctl.sent[sent:]} == {"p2"} and mgr.valid("p2")
    mgr.close()
    assert ctl.released[-1][0] == "p2" and len(ctl.released) == 2


def test_want_asks_for_a_newly_wanted_provider_at_once() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = LeaseManager(ctl, ["p1", "p2"], margin=MARGIN, clock=clock, jitter=0.0, wanted=["p1"])
    assert mgr.step() == pytest.approx(TTL / 3)
    assert [p for p, _ in ctl.sent] == ["p1"]
    with pytest.raises(LeaseLost, match="not asked for"):
        mgr.gate("p2")
    clock.now += 1.0  # mid-interval: p2 does not wait for p1's next renewal
    mgr.want(["p1", "p2"])
    mgr.step()
    assert [p for p, _ in ctl.sent] == ["p1", "p2"] and mgr.gate("p2") == Epoch(1, 2)


def test_a_lease_dropped_while_its_request_is_out_is_released_at_the_next_step() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    mgr = LeaseManager(ctl, ["p1"], margin=MARGIN, clock=clock)
    grant = ctl._answer

    def answer_after_a_drop(provider: str) -> LeaseGrant | LeaseDenied:
        mgr.want([])  # the daemon's loop drops it while the acquire is on the wire
        return grant(provider)

    ctl._answer = answer_after_a_drop  # type: ignore[method-assign]
    assert mgr.step() == 0.0  # due at once: the release
    ctl._answer = grant  # type: ignore[method-assign]
    mgr.step()
    assert ctl.released == [("p1", Epoch(1, 1))] and not mgr.valid("p1")
    assert len(ctl.sent) == 1


def test_a_lease_wanted_again_is_acquired_with_its_previous_epoch() -> None:
    clock = FakeClock()
    ctl = FakeController(clock)
    previous: list[Epoch | None] = []
    acquire = ctl.acquire

    def remembering(provider: str, prev: Epoch | None) -> LeaseGrant | LeaseDenied:
        previous.append(prev)
        return acquire(provider, prev)

    ctl.acquire = remembering  # type: ignore[method-assign]
    mgr = make(clock, ctl)
    mgr.step()
    mgr.want([])
    mgr.step()
    mgr.want(["p1"])
    mgr.step()
    assert previous == [None, Epoch(1, 1)] and mgr.gate("p1") == Epoch(1, 2)


def test_want_asks_again_at_once_for_a_wanted_lease_another_holder_had() -> None:
    # A denial's hint is the holder's remaining TTL; a holder that released it (a rebalance)
    # must not cost the new owner that wait: the daemon says want() again when the members change.
    clock = FakeClock()
    ctl = FakeController(clock)
    ctl.deny_to = "orch-b"
    mgr = make(clock, ctl)
    assert mgr.step() == pytest.approx(5.0)
    ctl.deny_to = None
    clock.now += 1.0
    mgr.want(["p1"])
    mgr.step()
    assert mgr.gate("p1") == Epoch(1, 1) and len(ctl.sent) == 2
