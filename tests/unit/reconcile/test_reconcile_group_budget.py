"""Budgets per host group (``policy.group_budgets``): a launch that would pass a group's money
per hour is not made, with reason ``budget`` naming the group (no I/O)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.configfile import ConfigError
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.budget import Usage, room
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.reasons import reasons_of
from orchestrator.reconcile.scaleout import PolicyInputs, scale_out

SITE = """
policy:
  group_budgets: {batch: {per_hour: 2.5}}
providers:
  sim: {module: xcesim, max_instances: 20}
templates:
  cpu:
    xce: {host_groups: [batch, short]}
    providers:
      sim: {flavor: c8, image: baked, cost_per_hour: 1.0}
  gpu:
    xce: {host_groups: [batch]}
    providers:
      sim: {flavor: g4, image: baked, cost_per_hour: 1.5}
  free:
    providers:
      sim: {flavor: c2, image: baked, cost_per_hour: 1.0}
"""


def test_a_group_budget_holds_every_template_of_the_group_and_names_the_group(tmp_path: Path) -> None:
    config = site(SITE)
    clock = FakeClock()
    log = FactLog(clock)
    [gpu] = log.intent("op-g", "sim", "gpu", 1)
    log.created(gpu, "sim", "gpu")
    records = list(ledger(log.facts).values())
    usage = Usage.of(config, records)
    assert usage.by_group == {"batch": 1.5}
    # 1.5 of 2.5 spent: one more cpu instance (1.0) fits, a second would pass the cap.
    fits = room(config, usage, "sim", "cpu")
    assert (fits.fits, fits.limit) == (1, "group budget")
    assert (fits.evidence["group"], fits.evidence["group_spend"], fits.evidence["group_budget"]) == ("batch", 1.5, 2.5)
    assert room(config, usage, "sim", "free").limit == "max_instances"  # in no group: not held

    [cpu] = log.intent("op-c", "sim", "cpu", 1)
    log.created(cpu, "sim", "cpu")
    clock.advance(3600)
    snap = DemandSnapshot(seq=1, time=clock.now, templates=(TemplateDemand("cpu", 3),))
    records = list(ledger(log.facts).values())
    health = ProviderHealth(config.policy.retry, random.Random(7))
    inputs = PolicyInputs(
        gaps_from_ledger(snap, records), records, health, Breakers.load(tmp_path, config.policy.breaker), clock.now
    )
    [decision] = scale_out(config, inputs)
    assert decision.ops == ()
    [reason] = reasons_of(decision)
    assert reason.code == "budget"
    assert reason.detail == "group budget: group batch spend 2.5 of budget 2.5/h"


def test_a_group_budget_needs_per_hour_per_month_or_both() -> None:
    assert site(SITE.replace("{per_hour: 2.5}", "{per_month: 900}")).policy.group_budgets["batch"].per_month == 900
    both = site(SITE.replace("{per_hour: 2.5}", "{per_hour: 2.5, per_month: 900}")).policy.group_budgets["batch"]
    assert (both.per_hour, both.per_month) == (2.5, 900)
    with pytest.raises(ConfigError, match="per_hour, per_month or both"):
        site(SITE.replace("{per_hour: 2.5}", "{}"))
