"""Daemons sharing a database decide a scale-out one at a time (``reconcile/deciding.py``):
a pass that cannot take the shared lock skips its scale-out; one that takes it counts what the
previous holder committed meanwhile, and does not ask for those hosts a second time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reconcile_support import FakeClock
from tffake import FakeEngine, FakeHosts, MemoryFacts, site_config, unit_ops

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostInfo, TemplateDemand
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import StoreUnavailable
from orchestrator.model.facts import Epoch, FactKind
from orchestrator.reconcile.loop import Reconciler


class View:
    def __init__(self, facts: MemoryFacts) -> None:
        self.log = facts
        self.snapshot = DemandSnapshot(1, 1, 0.0, (TemplateDemand("cpu", 3),))

    def demand(self) -> DemandSnapshot:
        return self.snapshot

    def hosts(self) -> list[HostInfo]:
        return []

    def facts(self, provider: str) -> list[Fact]:
        return self.log.facts(provider)

    def connected(self) -> bool:
        return True


class Lock:
    """The shared store's lock as another daemon leaves it: busy, free, or free just after that
    daemon committed its own intent for the whole gap."""

    def __init__(self, facts: MemoryFacts, busy: bool = False, others_intent: bool = False, down: bool = False):
        self.facts, self.busy, self.others_intent, self.down = facts, busy, others_intent, down
        self.held = False
        self.taken = 0

    def try_acquire(self) -> bool:
        if self.down:
            raise StoreUnavailable("shared store: locking provider '*scale-out' failed: connection refused")
        if self.busy:
            return False
        if self.others_intent:  # the other daemon's burst, committed before it let go of the lock
            intent = Fact(FactKind.REQUEST_INTENT, "sim", "op-other", Epoch(1, 9), template="cpu", count=3)
            self.facts.commit(intent)
        self.held = True
        self.taken += 1
        return True

    def release(self) -> None:
        assert self.held
        self.held = False


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedConfig:
    return site_config(tmp_path)


def reconciler(loaded: LoadedConfig, facts: MemoryFacts, lock: Lock | None) -> Reconciler:
    clock = FakeClock()
    ops = unit_ops(loaded, FakeEngine(), facts=facts, hosts=FakeHosts(), clock=lambda: clock.now)
    return Reconciler(
        loaded.config,
        ops,
        View(facts),
        clock=lambda: clock.now,
        state_dir=loaded.config.state_dir,
        scale_out_lock=lock,
    )


def test_a_pass_whose_lock_another_daemon_holds_skips_its_scale_out(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    report = reconciler(loaded, facts, Lock(facts, busy=True)).run_once()
    phase = report.phase("scale-out")
    assert phase.skipped == "another orchestrator is scaling out (the shared store's scale-out lock); next pass"
    assert report.ops == [] and facts.committed == []


def test_the_lock_s_next_holder_counts_the_intent_its_predecessor_committed(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    lock = Lock(facts, others_intent=True)
    report = reconciler(loaded, facts, lock).run_once()
    # The other daemon asked for the 3 hosts while this pass waited: nothing more is asked for.
    assert report.ops == [] and lock.taken == 1 and not lock.held
    assert [f.op_id for f in facts.committed if f.kind == FactKind.REQUEST_INTENT] == ["op-other"]
    assert {d.outcome for d in report.decisions} == {"no-gap"}


def test_with_the_lock_free_the_pass_fills_the_gap_and_lets_it_go(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    lock = Lock(facts)
    report = reconciler(loaded, facts, lock).run_once()
    assert len(report.ops) == 1 and lock.taken == 1 and not lock.held
    assert sum(1 for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED) == 3


def test_a_store_that_cannot_be_asked_skips_the_scale_out_saying_why(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    report = reconciler(loaded, facts, Lock(facts, down=True)).run_once()
    assert report.phase("scale-out").skipped.startswith(
        "the shared store's scale-out lock could not be asked for: shared store: locking"
    )
    assert report.ops == []
