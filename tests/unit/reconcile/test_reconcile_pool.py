"""The warm pool's decisions: take first, refill after, stopped cost, shrink (no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.configfile import ConfigError
from orchestrator.model.config import Config
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.offerings import Placement
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.budget import Usage, room
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.pool import refills, surplus, takes
from orchestrator.reconcile.scaleout import PolicyInputs, scale_out

SITE = """
providers:
  sim: {module: xcesim, max_instances: 6, budget_per_hour: 4.5}
templates:
  cpu:
    providers:
      sim: {flavor: c8, image: baked, cost_per_hour: 1.0, stopped_cost_per_hour: 0.25, warm_pool: 2}
"""


class Pool:
    """One site, its facts and trackers; ``inputs`` as the scale-out phase builds them."""

    def __init__(self, tmp_path: Path, text: str = SITE) -> None:
        self.config: Config = site(text)
        self.clock = FakeClock()
        self.log = FactLog(self.clock)
        self.health = ProviderHealth(self.config.policy.retry, random.Random(7))
        self.breakers = Breakers.load(tmp_path, self.config.policy.breaker)

    def inputs(self, wanted: int) -> PolicyInputs:
        snap = DemandSnapshot(seq=1, time=self.clock.now, templates=(TemplateDemand("cpu", wanted),))
        records = list(ledger(self.log.facts).values())
        return PolicyInputs(gaps_from_ledger(snap, records), records, self.health, self.breakers, self.clock.now)


@pytest.fixture
def world(tmp_path: Path) -> Pool:
    return Pool(tmp_path)


def test_demand_takes_the_pool_first_then_creates_the_rest_then_refills(world: Pool) -> None:
    pool = world.log.pool("op-fill", "sim", "cpu", 2)
    world.clock.advance(5)
    # Pool instances are no hosts on their way: a demand of 3 is a gap of 3.
    assert world.inputs(3).gaps["cpu"].gap == 3
    [take] = takes(world.config, world.inputs(3))
    assert (take.provider, take.keys) == ("sim", tuple(pool))
    # Nothing is refilled while demand is not served.
    assert refills(world.config, world.inputs(3), world.inputs(3).gaps) == []
    world.log.start("op-start", "sim", "cpu", pool, expected=False)
    # Taken keys are hosts on their way: one is left for a create (no cooldown from the fill).
    [decision] = scale_out(world.config, world.inputs(3))
    assert decision.ops == (OpRequest("cpu", "sim", 1, 1, (Placement("c8", 1),)),)
    world.log.intent("op-rest", "sim", "cpu", 1)
    served = world.inputs(3)
    assert served.gaps["cpu"].gap == 0
    # 3 running + 2 pool = 5 of max_instances 6; 3.0 + 2 × 0.25 = 3.5 of the 4.5 budget.
    # A fill goes to the default offering: it names no placements.
    assert refills(world.config, served, served.gaps) == [OpRequest("cpu", "sim", 2, 2)]


def test_pool_instances_count_against_max_instances_and_the_budget_at_their_stopped_cost(world: Pool) -> None:
    world.log.pool("op-fill", "sim", "cpu", 2)
    usage = Usage.of(world.config, ledger(world.log.facts).values())
    assert (usage.instances["sim"], usage.spend["sim"]) == (2, 0.5)
    # 4.0 of budget left at 1.0 each: 4 new hosts; max_instances leaves 4 as well.
    assert room(world.config, usage, "sim", "cpu").fits == 4
    # A start adds 0.75 each: the budget lets 2 start only once 3 hosts run (3.5 + 2 × 0.75 > 4.5).
    for i in range(3):
        world.log.intent(f"op-run{i}", "sim", "cpu", 1)
    [take] = takes(world.config, world.inputs(5))
    assert len(take.keys) == 1 and take.evidence["room"]["limit"] == "provider budget"


def test_a_lowered_target_returns_the_oldest_surplus_and_a_removed_template_all(world: Pool) -> None:
    old = world.log.pool("op-old", "sim", "cpu", 2)
    world.clock.advance(10)
    new = world.log.pool("op-new", "sim", "cpu", 1)
    assert surplus(world.config, ledger(world.log.facts).values(), ["sim"]) == {"sim": old[:1]}
    assert surplus(world.config, ledger(world.log.facts).values(), []) == {}  # no lease: nothing
    smaller = site(SITE.replace("warm_pool: 2", "warm_pool: 0"))
    assert surplus(smaller, ledger(world.log.facts).values(), ["sim"]) == {"sim": [*old, *new]}
    # Taken instances are no longer the pool's.
    world.log.start("op-start", "sim", "cpu", old)
    assert surplus(smaller, ledger(world.log.facts).values(), ["sim"]) == {"sim": new}


def test_a_fill_in_flight_counts_toward_the_target_and_is_never_started(world: Pool) -> None:
    world.log.intent("op-fill", "sim", "cpu", 2, detail="warm-pool fill")  # not yet created
    inputs = world.inputs(2)
    assert refills(world.config, inputs, inputs.gaps) == []
    assert takes(world.config, inputs) == []


def test_a_warm_pool_on_a_module_that_cannot_stop_instances_is_refused() -> None:
    text = SITE.replace("module: xcesim", "module: aws")
    with pytest.raises(ConfigError, match=r"templates\.cpu\.providers\.sim\.warm_pool: 2: module 'aws' cannot"):
        site(text)
    dear = SITE.replace("stopped_cost_per_hour: 0.25", "stopped_cost_per_hour: 2")
    with pytest.raises(ConfigError, match="stopped_cost_per_hour: 2 is more than cost_per_hour 1"):
        site(dear)


def test_a_large_pool_is_taken_in_start_ops_of_at_most_50_keys(tmp_path: Path) -> None:
    world = Pool(tmp_path, SITE.replace("max_instances: 6, budget_per_hour: 4.5", "max_instances: 200"))
    pool = world.log.pool("op-fill", "sim", "cpu", 120)
    chunks = takes(world.config, world.inputs(110))
    assert [len(t.keys) for t in chunks] == [50, 50, 10]
    assert [k for t in chunks for k in t.keys] == pool[:110]


def test_no_fill_is_asked_of_a_default_offering_in_backoff_or_a_provider_held_for_quota(world: Pool) -> None:
    @dataclass
    class Held:
        capacity_until: float | None = None
        quota_until: float | None = None

        def capacity(self, provider: str, placement: str, now: float) -> float | None:
            return self.capacity_until if placement == "c8" else None

        def quota(self, provider: str, now: float) -> float | None:
            return self.quota_until

    until = world.clock.now + 60
    for held in (Held(capacity_until=until), Held(quota_until=until)):
        inputs = replace(world.inputs(0), holds=held)
        assert refills(world.config, inputs, inputs.gaps) == []
    inputs = replace(world.inputs(0), holds=Held())
    assert refills(world.config, inputs, inputs.gaps) == [OpRequest("cpu", "sim", 2, 2)]
