"""Demand, exactly: gap = wanted − in flight − awaited − unreflected, over many passes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from reconcile_support import FactLog, FakeClock

from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.facts import FactKind
from orchestrator.reconcile.gap import gaps


@dataclass
class World:
    """A controller with one template: work needing ``need`` hosts; each joined host runs a piece.

    Every event (a fact, a join) makes a new demand snapshot stamped with the controller's
    clock, like the simulated controller does; the orchestrator may read an old one.
    """

    clock: FakeClock
    log: FactLog
    need: int
    expected: dict[str, bool] = field(default_factory=dict)  # key → joined
    snapshots: list[DemandSnapshot] = field(default_factory=list)

    def snapshot(self) -> DemandSnapshot:
        joined = sum(self.expected.values())
        in_flight = len(self.expected) - joined
        wanted = max(0, self.need - joined)  # joined hosts are busy: idle = 0
        snap = DemandSnapshot(
            seq=len(self.snapshots) + 1,
            time=self.clock.now,
            templates=(TemplateDemand("cpu", wanted, wanted, in_flight, joined, 0, joined),),
        )
        self.snapshots.append(snap)
        return snap

    def tick(self) -> None:
        self.clock.advance(1.0)


def requested(log: FactLog) -> int:
    """Hosts asked for so far (keys of every requestIntent)."""
    return sum(f.count for f in log.facts if f.kind == FactKind.REQUEST_INTENT)


@pytest.mark.parametrize("seed", range(25))
def test_steady_demand_creates_exactly_the_missing_hosts(seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    log = FactLog(clock)
    world = World(clock, log, need=rng.randint(1, 40))
    world.snapshot()
    pending: list[str] = []  # keys committed, not yet created
    ops = 0
    for _ in range(300):
        # A pass reads a snapshot that may lag behind a few events, and its own facts.
        lag = rng.randint(0, min(5, len(world.snapshots) - 1))
        snap = world.snapshots[-1 - lag]
        gap = gaps(snap, log.facts)["cpu"].gap
        if gap > 0:
            world.tick()
            ops += 1
            pending += log.intent(f"op-{ops:04d}", "sim", "cpu", gap)
            world.snapshot()
        assert requested(log) <= world.need, "asked for more hosts than the demand"
        # The world moves on: some keys get created/expected, some expected hosts join.
        for _ in range(rng.randint(0, 3)):
            world.tick()
            if pending and rng.random() < 0.6:
                key = pending.pop(rng.randrange(len(pending)))
                log.created(key, "sim", "cpu")
                world.expected[key] = False
            else:
                waiting = [k for k, joined in world.expected.items() if not joined]
                if waiting:
                    world.expected[rng.choice(waiting)] = True
            world.snapshot()
    assert requested(log) == world.need
    final = gaps(world.snapshots[-1], log.facts)["cpu"]
    assert (final.gap, final.surplus) == (0, 0)


def test_an_expected_host_newer_than_the_snapshot_is_not_asked_for_twice() -> None:
    clock = FakeClock()
    log = FactLog(clock)
    old = DemandSnapshot(seq=1, time=clock.now, templates=(TemplateDemand("cpu", wanted=3),))
    keys = log.intent("op-a", "sim", "cpu", 3)
    clock.advance(2)
    log.created(keys[0], "sim", "cpu")  # committed after the snapshot: its in_flight lacks it
    gap = gaps(old, log.facts)["cpu"]
    assert (gap.awaited, gap.unreflected, gap.gap) == (2, 1, 0)
    newer = DemandSnapshot(seq=2, time=clock.now, templates=(TemplateDemand("cpu", wanted=3, in_flight=1),))
    gap = gaps(newer, log.facts)["cpu"]
    assert (gap.in_flight, gap.awaited, gap.unreflected, gap.gap) == (1, 2, 0, 0)


def test_falling_demand_keeps_the_op_in_flight() -> None:
    clock = FakeClock()
    log = FactLog(clock)
    keys = log.intent("op-a", "sim", "cpu", 4)
    # Demand drops to nothing while the op's hosts are on their way.
    snap = DemandSnapshot(seq=5, time=clock.now, templates=(TemplateDemand("cpu", wanted=0),))
    gap = gaps(snap, log.facts)["cpu"]
    assert (gap.gap, gap.surplus, dict(gap.awaited_by_op)) == (0, 4, {"op-a": 4})
    # The op goes on (nothing in the gap cancels it); its hosts arrive and nothing more is asked.
    for key in keys:
        clock.advance(1)
        log.created(key, "sim", "cpu")
    clock.advance(1)
    snap = DemandSnapshot(seq=6, time=clock.now, templates=(TemplateDemand("cpu", wanted=0, in_flight=4),))
    gap = gaps(snap, log.facts)["cpu"]
    assert (gap.gap, gap.surplus, gap.awaited) == (0, 4, 0)
    # Demand comes back to 2: the 4 hosts on their way cover it.
    snap = DemandSnapshot(seq=7, time=clock.now, templates=(TemplateDemand("cpu", wanted=2, in_flight=4),))
    assert gaps(snap, log.facts)["cpu"].gap == 0


def test_a_key_gone_before_it_was_expected_is_asked_for_again() -> None:
    clock = FakeClock()
    log = FactLog(clock)
    keys = log.intent("op-a", "sim", "cpu", 3)
    log.gone(keys[0], "sim", "cpu")  # abandoned: never reached the cloud
    log.gone(keys[1], "sim", "cpu", FactKind.LOST)
    snap = DemandSnapshot(seq=1, time=clock.now, templates=(TemplateDemand("cpu", wanted=3),))
    gap = gaps(snap, log.facts)["cpu"]
    assert (gap.awaited, gap.gap) == (1, 2)
    assert gap.evidence()["awaited_by_op"] == {"op-a": 1}


def test_templates_of_ops_without_demand_and_demand_without_ops() -> None:
    clock = FakeClock()
    log = FactLog(clock)
    log.intent("op-a", "sim", "gpu", 2)
    snap = DemandSnapshot(seq=1, time=clock.now, templates=(TemplateDemand("cpu", wanted=5, in_flight=1),))
    result = gaps(snap, log.facts)
    assert sorted(result) == ["cpu", "gpu"]
    assert (result["cpu"].gap, result["gpu"].gap, result["gpu"].surplus) == (4, 0, 2)
