"""Retries: exponential backoff with jitter on the injected clock, and when an op is given up."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.clients.terraform.messages import Diagnostic
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import RetrySettings
from orchestrator.ops.openops import open_ops
from orchestrator.ops.refusal import classify
from orchestrator.reconcile.budget import Usage
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.refusedops import op_hold
from orchestrator.reconcile.retry import retry_decision
from orchestrator.workspace.documents import LocalDocuments

SITE = """
policy:
  budget_per_hour: 4
  retry: {base: 10s, max: 5m, attempts: 3}
providers:
  sim: {module: xcesim}
  next: {module: xcesim, priority: 5}
templates:
  cpu:
    providers:
      sim: {flavor: c8, image: deb, cost_per_hour: 1.0}
      next: {flavor: c8, image: deb, cost_per_hour: 1.0}
"""

TIMEOUT = classify([Diagnostic("error", "InternalError: simulated API failure during create (error rate 0.3)")])
BAD = classify([Diagnostic("error", "InvalidParameterValue: xce:max_lifetime 'x' is not whole seconds")])


def test_backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() -> None:
    backoff = Backoff(10, 300)
    assert [backoff.ceiling(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]
    rng = random.Random(1)
    for attempt in range(1, 12):
        delays = [backoff.delay(attempt, rng) for _ in range(200)]
        top = backoff.ceiling(attempt)
        assert all(top / 2 <= d <= top for d in delays)
        assert max(delays) - min(delays) > top / 4  # jitter spreads the retries
    assert backoff.ceiling(10_000) == 300  # no overflow on a long outage


def test_a_transient_failure_waits_its_backoff_then_retries_the_same_op() -> None:
    config = site(SITE)
    clock = FakeClock()
    health = ProviderHealth(config.policy.retry, random.Random(2))
    log = FactLog(clock)
    log.intent("op-a", "sim", "cpu", 2)
    usage = Usage.of(config, ledger(log.facts).values())
    at = health.failed("sim", "cpu", TIMEOUT, clock.now)
    assert clock.now + 5 <= at <= clock.now + 10
    decision = retry_decision(config, usage, health, "sim", "cpu", clock.now)
    assert (decision.action, decision.at) == ("wait", at)
    clock.now = at
    assert retry_decision(config, usage, health, "sim", "cpu", clock.now).action == "retry"
    # The second failure waits longer: [10, 20].
    second = health.failed("sim", "cpu", TIMEOUT, clock.now)
    assert clock.now + 10 <= second <= clock.now + 20


def test_after_the_attempts_the_op_is_given_up_for_the_next_provider() -> None:
    config = site(SITE)
    clock = FakeClock()
    health = ProviderHealth(config.policy.retry, random.Random(3))
    usage = Usage()
    for _ in range(config.policy.retry.attempts):
        health.failed("sim", "cpu", TIMEOUT, clock.now)
    decision = retry_decision(config, usage, health, "sim", "cpu", clock.now)
    assert decision.action == "abandon"
    assert decision.evidence["block"]["failures"] == 3


def test_a_permanent_failure_is_not_retried_until_the_configuration_is_reloaded() -> None:
    config = site(SITE)
    clock = FakeClock()
    health = ProviderHealth(config.policy.retry, random.Random(4))
    health.failed("sim", "cpu", BAD, clock.now)
    clock.advance(10 * 24 * 3600)
    decision = retry_decision(config, Usage(), health, "sim", "cpu", clock.now)
    assert (decision.action, decision.evidence["block"]["until"]) == ("abandon", None)
    assert [b.kind.value for b in health.blocks(clock.now)] == ["permanent"]
    health.clear()
    assert retry_decision(config, Usage(), health, "sim", "cpu", clock.now).action == "retry"


@pytest.mark.parametrize(("budget", "action"), [(4, "retry"), (3, "abandon")])
def test_a_retry_never_launches_past_a_lowered_budget(budget: int, action: str) -> None:
    clock = FakeClock()
    log = FactLog(clock)
    log.intent("op-a", "sim", "cpu", 4)  # 4 × 1.0/h committed under a budget of 4
    config = site(SITE.replace("budget_per_hour: 4", f"budget_per_hour: {budget}"))
    usage = Usage.of(config, ledger(log.facts).values())
    decision = retry_decision(config, usage, ProviderHealth(config.policy.retry), "sim", "cpu", clock.now)
    assert decision.action == action
    if action == "abandon":
        assert decision.evidence["budget"] == {"limit": "cluster budget", "spend": 4.0, "budget": 3}


def test_retry_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="at most max"):
        RetrySettings(base=60, max=10)


def test_an_op_whose_offering_or_quota_is_held_is_never_retried(tmp_path: Path) -> None:
    """A transient failure would wait and retry; an op one of whose offerings the memory of
    refusals holds (another op's refusal), or whose provider's quota, is closed instead."""
    config = site(SITE)
    clock = FakeClock()
    health = ProviderHealth(config.policy.retry, random.Random(2))
    memory = RefusalMemory.load(LocalDocuments(tmp_path), config.policy, random.Random(2))
    log = FactLog(clock)
    log.intent("op-a", "sim", "cpu", 2)
    [op] = open_ops(log.facts)
    usage = Usage.of(config, ledger(log.facts).values())
    health.failed("sim", "cpu", TIMEOUT, clock.now)
    hold = op_hold(memory, config, "sim", op, "transient", clock.now)
    assert hold is None and retry_decision(config, usage, health, "sim", "cpu", clock.now, hold).action == "wait"
    memory.refused("sim", "c8", "capacity", "InsufficientCapacity", clock.now)
    hold = op_hold(memory, config, "sim", op, "transient", clock.now)
    decision = retry_decision(config, usage, health, "sim", "cpu", clock.now, hold)
    assert decision.action == "abandon" and decision.evidence["refusal"]["placement"] == "c8"
    memory.succeeded("sim", "c8")
    memory.refused("sim", "", "quota", "InstanceLimitExceeded", clock.now)
    hold = op_hold(memory, config, "sim", op, "transient", clock.now)
    assert retry_decision(config, usage, health, "sim", "cpu", clock.now, hold).evidence["refusal"]["scope"] == "quota"
