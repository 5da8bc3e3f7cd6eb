"""Scale-out decisions: priority and fallback, room and budgets, granularity, cooldown, breaker."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.clients.terraform.messages import Diagnostic
from orchestrator.model.config import Config
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.offerings import Placement
from orchestrator.model.ops import OpRequest
from orchestrator.ops.refusal import classify
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.scaleout import PolicyInputs, ScaleOutDecision, scale_out
from orchestrator.workspace.documents import LocalDocuments

SITE = """
policy:
  cooldown: 60s
  budget_per_hour: 10
providers:
  onprem: {module: xcesim, priority: 30, max_instances: 4}
  cheap: {module: xcesim, priority: 20, max_instances: 100, budget_per_hour: 3}
  dear: {module: xcesim, priority: 10, max_instances: 100, granularity: 4}
templates:
  cpu:
    providers:
      onprem: {flavor: small, image: deb, cost_per_hour: 0}
      cheap: {flavor: c8, image: deb, cost_per_hour: 0.5}
      dear: {flavor: c8x, image: deb, cost_per_hour: 1.0}
  gpu:
    providers:
      dear: {flavor: g4, image: deb, cost_per_hour: 2.0, max_instances: 6}
"""

# The one flavor of each template on each provider above: every op's keys go to that offering.
FLAVOR = {("cpu", "onprem"): "small", ("cpu", "cheap"): "c8", ("cpu", "dear"): "c8x", ("gpu", "dear"): "g4"}


def op(template: str, provider: str, count: int, asked: int) -> OpRequest:
    """An op of ``count`` on the template's one offering of ``provider``."""
    return OpRequest(template, provider, count, asked, (Placement(FLAVOR[(template, provider)], count),))


TIMEOUT = classify([Diagnostic("error", "RequestTimeout: simulated lost response to create")])


class Pass:
    """One site, its facts and its trackers; ``decide`` runs the scale-out policy on a snapshot."""

    def __init__(self, tmp_path: Path, text: str = SITE) -> None:
        self.config: Config = site(text)
        self.clock = FakeClock()
        self.log = FactLog(self.clock)
        self.health = ProviderHealth(self.config.policy.retry, random.Random(7))
        self.breakers = Breakers.load(tmp_path, self.config.policy.breaker)
        self.refusals = RefusalMemory.load(LocalDocuments(tmp_path), self.config.policy, random.Random(7))

    def refuse(self, provider: str, template: str, kind: str) -> None:
        """The cloud refused the template's offering on ``provider`` (the loop records it so)."""
        self.refusals.refused(provider, FLAVOR[(template, provider)], kind, f"{kind} refused", self.clock.now)

    def decide(self, fallback: frozenset[str] = frozenset(), **wanted: int) -> dict[str, ScaleOutDecision]:
        snap = DemandSnapshot(
            seq=1, time=self.clock.now, templates=tuple(TemplateDemand(t, n) for t, n in wanted.items())
        )
        records = ledger(self.log.facts).values()
        gaps = gaps_from_ledger(snap, records)
        inputs = PolicyInputs(
            gaps, records, self.health, self.breakers, self.clock.now, fallback=fallback, holds=self.refusals
        )
        return {d.template: d for d in scale_out(self.config, inputs)}

    def commit(self, decision: ScaleOutDecision) -> list[list[str]]:
        """Commit the intents of a decision's ops, as the executor would; returns their keys."""
        keys = []
        for i, op in enumerate(decision.ops):
            keys.append(self.log.intent(f"op-{self.clock.now:.0f}-{i}", op.provider, op.template, op.count))
        return keys


@pytest.fixture
def world(tmp_path: Path) -> Pass:
    return Pass(tmp_path)


def test_priority_first_then_spill_with_granularity_and_budget(world: Pass) -> None:
    decision = world.decide(cpu=20)["cpu"]
    # onprem (priority 30) takes its 4; cheap is capped by its budget 3/h at 0.5/h → 6;
    # dear takes the other 10 rounded up to its granule of 4 → 12? No: the cluster budget
    # 10/h minus 3 spent on cheap leaves 7/h → 7 at 1.0/h, rounded down to the granule → 4.
    assert decision.ops == (
        op("cpu", "onprem", 4, 20),
        op("cpu", "cheap", 6, 16),
        op("cpu", "dear", 4, 10),
    )
    assert decision.outcome == "partial"
    limits = [p.get("skipped") or p["room"]["limit"] for p in decision.evidence["providers"]]
    assert limits == ["max_instances", "provider budget", "cluster budget"]


NO_POLICY = SITE.replace("policy:\n  cooldown: 60s\n  budget_per_hour: 10\n", "")


def test_granularity_rounds_the_gap_up(tmp_path: Path) -> None:
    world = Pass(tmp_path, NO_POLICY)
    world.log.intent("op-full", "onprem", "cpu", 4)
    world.clock.advance(31)  # past the default cooldown of that op
    world.refuse("cheap", "cpu", "capacity")
    decision = world.decide(cpu=8)["cpu"]
    # 8 wanted, 4 are awaited from onprem: 4 more, and dear hands out 4 at a time.
    assert decision.ops == (op("cpu", "dear", 4, 4),)
    world.commit(decision)
    held = world.decide(cpu=9)["cpu"]
    assert (held.outcome, held.ops) == ("cooldown", ())  # 1 more is wanted, inside the cooldown
    world.clock.advance(31)
    world.refuse("cheap", "cpu", "capacity")  # still full
    assert world.decide(cpu=9)["cpu"].ops == (op("cpu", "dear", 4, 1),)


def test_budget_is_never_exceeded_under_retries(world: Pass) -> None:
    rng = random.Random(3)
    cost = {("onprem", "cpu"): 0.0, ("cheap", "cpu"): 0.5, ("dear", "cpu"): 1.0, ("dear", "gpu"): 2.0}
    spent: list[float] = []
    for _ in range(30):
        for decision in world.decide(cpu=100, gpu=10).values():
            for keys, op in zip(world.commit(decision), decision.ops, strict=True):
                # Every op fails; half the time its outcome is unknown (its keys may have
                # launched and stay counted), else nothing reached the cloud and it is abandoned.
                world.health.failed(op.provider, op.template, TIMEOUT, world.clock.now)
                if rng.random() < 0.5:
                    for key in keys:
                        world.log.gone(key, op.provider, op.template)
        counted = [r for r in ledger(world.log.facts).values() if r.counted]
        spend = sum(cost[(r.provider, r.template)] for r in counted)
        assert spend <= 10 + 1e-9, "cluster budget exceeded"
        assert sum(cost[(r.provider, r.template)] for r in counted if r.provider == "cheap") <= 3 + 1e-9
        spent.append(spend)
        world.clock.advance(61)
    # The budget was used up to less than one granule of the dearest provider (4 × 1.0/h).
    assert 10 - 4 < max(spent) <= 10


def test_fallback_by_priority_after_a_capacity_error(world: Pass) -> None:
    first = world.decide(cpu=2)["cpu"]
    assert [op.provider for op in first.ops] == ["onprem"]
    keys = world.commit(first)[0]
    # onprem has no capacity: the loop records the failure and abandons the uncreated keys.
    world.refuse("onprem", "cpu", "capacity")
    for key in keys:
        world.log.gone(key, "onprem", "cpu")
    world.clock.advance(1)  # well inside the cooldown: a refused op does not count for it
    second = world.decide(cpu=2)["cpu"]
    assert second.ops == (op("cpu", "cheap", 2, 2),)
    skipped = second.evidence["providers"][0]
    assert (skipped["provider"], skipped["skipped"]) == ("onprem", "backoff")
    # cheap is full too: the next by priority, dear, in its granule of 4.
    for key in world.commit(second)[0]:
        world.log.gone(key, "cheap", "cpu")
    world.refuse("cheap", "cpu", "capacity")
    third = world.decide(cpu=2)["cpu"]
    assert third.ops == (op("cpu", "dear", 4, 2),)
    assert [p["provider"] for p in third.evidence["providers"]] == ["onprem", "cheap", "dear"]
    # Once the backoff is over, onprem (the highest priority) is asked first again.
    world.clock.advance(world.config.policy.capacity_backoff.max)
    assert world.decide(cpu=2)["cpu"].ops[0].provider == "onprem"


def test_quota_blocks_every_template_of_the_provider(world: Pass) -> None:
    world.refuse("dear", "cpu", "quota")
    decision = world.decide(gpu=1)["gpu"]
    assert (decision.outcome, decision.ops) == ("no-room", ())
    assert decision.evidence["providers"][0]["skipped"] == "quota"


def test_transient_failures_keep_the_provider_until_the_attempts_run_out(world: Pass) -> None:
    attempts = world.config.policy.retry.attempts
    for _ in range(attempts - 1):
        world.health.failed("onprem", "cpu", TIMEOUT, world.clock.now)
    assert world.decide(cpu=1)["cpu"].ops[0].provider == "onprem"
    world.health.failed("onprem", "cpu", TIMEOUT, world.clock.now)
    assert world.decide(cpu=1)["cpu"].ops[0].provider == "cheap"
    world.health.succeeded("onprem", "cpu")
    assert world.decide(cpu=1)["cpu"].ops[0].provider == "onprem"


def test_cooldown_between_scale_ups_of_a_template(world: Pass) -> None:
    world.commit(world.decide(cpu=1)["cpu"])
    world.clock.advance(59)
    held = world.decide(cpu=3, gpu=1)
    assert held["cpu"].outcome == "cooldown"
    assert held["cpu"].evidence["cooldown"]["until"] == pytest.approx(world.clock.now + 1)
    assert held["gpu"].outcome == "ops"  # the cooldown is per template
    world.clock.advance(1)
    assert world.decide(cpu=3)["cpu"].ops == (op("cpu", "onprem", 2, 2),)


def test_the_fallback_of_a_refused_scale_up_is_not_held_by_the_cooldown(world: Pass) -> None:
    """A create refused half-way did make hosts (so it is a scale-up); the rest of it goes to the
    next provider in the same phase, not a cooldown later."""
    world.commit(world.decide(cpu=1)["cpu"])
    world.clock.advance(1)
    assert world.decide(cpu=3)["cpu"].outcome == "cooldown"
    assert world.decide(frozenset({"cpu"}), cpu=3)["cpu"].ops == (op("cpu", "onprem", 2, 2),)
    assert world.decide(frozenset({"gpu"}), cpu=3)["cpu"].outcome == "cooldown"  # per template


def test_template_max_instances_on_a_provider(tmp_path: Path) -> None:
    world = Pass(tmp_path, NO_POLICY)
    decision = world.decide(gpu=5)["gpu"]
    # 5 rounds up to dear's granule: 8; gpu is capped at 6 on dear, so one granule of 4.
    assert (decision.outcome, decision.ops) == ("partial", (op("gpu", "dear", 4, 5),))
    assert decision.evidence["providers"][0]["room"]["limit"] == "template max_instances"
    world.commit(decision)
    world.clock.advance(61)
    again = world.decide(gpu=5)["gpu"]  # 1 more wanted, 2 left under the cap: less than a granule
    assert (again.outcome, again.evidence["providers"][0]["skipped"]) == ("no-room", "template max_instances")


def test_breaker_open_stops_requests_and_half_open_sends_one_probe(world: Pass) -> None:
    for n in range(world.config.policy.breaker.failures):
        world.breakers.failure("cpu", "bootstrap", f"host {n}: role xce_node_manager failed", world.clock.now)
    assert world.decide(cpu=5)["cpu"].outcome == "breaker-open"
    world.clock.advance(world.config.policy.breaker.cool_off)
    probe = world.decide(cpu=5)["cpu"]
    assert probe.ops == (op("cpu", "onprem", 1, 1),)
    assert probe.evidence["breaker"]["position"] == "half-open"
    # Only one probe: while it is out, nothing more is asked for, cooldown or not.
    world.commit(probe)
    world.clock.advance(3 * world.config.policy.cooldown)
    assert world.decide(cpu=5)["cpu"].outcome == "breaker-probe"
    world.breakers.success("cpu", world.clock.now)  # the probe joined
    assert world.decide(cpu=5)["cpu"].ops == (op("cpu", "onprem", 3, 4), op("cpu", "cheap", 1, 1))


def test_no_gap_and_unknown_templates(world: Pass) -> None:
    decisions = world.decide(cpu=0, tpu=3)
    assert (decisions["cpu"].outcome, decisions["tpu"].outcome) == ("no-gap", "unknown-template")
    assert decisions["tpu"].evidence["gap"]["gap"] == 3


@pytest.mark.parametrize("seed", range(10))
def test_steady_demand_through_the_policy_creates_exactly_the_hosts(tmp_path: Path, seed: int) -> None:
    # No budget, unit granules: every pass decides, some creates are refused for capacity
    # (keys closed, provider backed off), the others deliver; in the end exactly `need` hosts.
    world = Pass(tmp_path, NO_POLICY.replace("granularity: 4", "granularity: 1"))
    rng = random.Random(seed)
    need = rng.randint(5, 60)
    delivered: list[str] = []
    for _ in range(200):
        snap_time = world.clock.now
        decisions = world.decide(cpu=max(0, need - len(delivered)))
        for keys, op in zip(world.commit(decisions["cpu"]), decisions["cpu"].ops, strict=True):
            if rng.random() < 0.3:
                world.refuse(op.provider, "cpu", "capacity")
                for key in keys:
                    world.log.gone(key, op.provider, "cpu")
            else:
                for key in keys:
                    world.clock.advance(0.01)
                    # Created, expected and (by the next snapshot) joined and busy: the
                    # controller's wanted drops by one.
                    world.log.created(key, op.provider, "cpu")
                    delivered.append(key)
        assert len(delivered) <= need
        world.clock.advance(max(31.0, world.clock.now - snap_time))
    assert len(delivered) == need
