"""LeasedFence: the standalone gate closes at ``renew_sent + TTL − margin`` when renewals fail.

A fake clock and fake rows: no threads (``acquire(start=False)``, ``step()`` by hand).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from orchestrator.errors import LeaseLost, StoreUnavailable
from orchestrator.ops.standalone import STANDALONE_EPOCH, LeasedFence


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rows:
    """The lease rows; ``down`` makes every call fail like an unreachable database."""

    clock: Clock
    down: bool = False
    taken_by_another: bool = False
    calls: list[tuple[str, float]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def take(self, provider: str, holder: str, ttl: float, grace: float) -> int:
        self.calls.append(("take", self.clock.now))
        return 7

    def check(self, provider: str, grace: float) -> None:
        self.calls.append(("check", self.clock.now))

    def renew(self, provider: str, holder: str, grant_no: int, ttl: float) -> bool:
        self.calls.append(("renew", self.clock.now))
        if self.down:
            raise StoreUnavailable("shared store: renewing failed: connection refused")
        return not self.taken_by_another and grant_no == 7

    def release(self, provider: str, holder: str, grant_no: int) -> None:
        self.released.append(provider)

    def close(self) -> None:
        pass


def fence(clock: Clock, rows: Rows) -> LeasedFence:
    return LeasedFence(rows, ["p1"], margin=2.0, holder="cmd-a", ttl=15.0, grace=15.0, clock=clock).acquire(start=False)


def test_renewals_every_third_of_the_ttl_keep_the_gate_open() -> None:
    clock = Clock()
    rows = Rows(clock)
    held = fence(clock, rows)
    for _ in range(12):  # a minute
        clock.now += held.step()
        assert held.gate("p1") == STANDALONE_EPOCH
    assert [t for kind, t in rows.calls if kind == "renew"][:3] == [105.0, 110.0, 115.0]


def test_the_gate_closes_at_renew_sent_plus_ttl_minus_margin_when_renewals_fail() -> None:
    clock = Clock()
    rows = Rows(clock)
    held = fence(clock, rows)  # taken at 100: valid until 113
    rows.down = True
    while clock.now < 112.9:
        clock.now = min(112.9, clock.now + held.step())
        assert held.valid("p1")
    retries = [t for kind, t in rows.calls if kind == "renew"]
    assert retries[0] == 105.0 and all(b - a == pytest.approx(1.0) for a, b in itertools.pairwise(retries))
    clock.now = 113.0
    assert not held.valid("p1")
    with pytest.raises(LeaseLost, match=r"^provider 'p1': the standalone lease could not be renewed in time"):
        held.gate("p1")

    # The database answers again and no one else was admitted: renewed, the gate opens again.
    rows.down = False
    clock.now = 120.0
    held.step()
    assert held.gate("p1") == STANDALONE_EPOCH
    clock.now = 132.9
    assert held.valid("p1")  # until 120 + 15 - 2 at the latest


def test_a_renewal_that_finds_another_grant_closes_the_gate_for_good() -> None:
    clock = Clock()
    rows = Rows(clock)
    held = fence(clock, rows)
    rows.taken_by_another = True
    clock.now = 105.0
    held.step()
    with pytest.raises(LeaseLost, match="another command holds its standalone lease now"):
        held.gate("p1")
    rows.taken_by_another = False
    clock.now = 110.0
    held.step()
    assert not held.valid("p1")  # never again: another holder may have mutated meanwhile
    held.close()
    assert rows.released == []  # and it is not released: it is not this process's to free


def test_close_releases_the_grant() -> None:
    clock = Clock()
    rows = Rows(clock)
    held = fence(clock, rows)
    held.close()
    assert rows.released == ["p1"]
    assert not held.valid("p1")
