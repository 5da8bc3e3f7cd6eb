"""Budgets per host group per calendar month (``policy.group_budgets.<g>.per_month``): no launch
once the group's spend this month (UTC, from the ledger) plus an hour of its spend per hour
would pass the cap; a new month starts from nothing (docs/cost.md)."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from test_reconcile_loop import build
from tffake import SITE as TF_SITE
from tffake import FakeEngine

from orchestrator.configfile import parse_config
from orchestrator.model.costs import month_of
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.facts import FactKind
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.budget import Usage, room
from orchestrator.reconcile.costs import month_spend
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.pool import refills, takes
from orchestrator.reconcile.reasons import reasons_of
from orchestrator.reconcile.scaleout import PolicyInputs, ScaleOutDecision, scale_out

SITE = """
policy:
  group_budgets: {batch: {per_month: 100}}
providers:
  sim: {module: xcesim, max_instances: 20}
templates:
  cpu:
    xce: {host_groups: [batch]}
    providers:
      sim: {flavor: c8, image: baked, cost_per_hour: 1.0}
"""


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def decide(log: FactLog, tmp_path: Path, wanted: int) -> ScaleOutDecision:
    config = site(SITE)
    now = log.clock.now
    records = list(ledger(log.facts).values())
    live = sum(1 for r in records if not r.gone)
    snap = DemandSnapshot(seq=1, time=now, templates=(TemplateDemand("cpu", live + wanted),))
    inputs = PolicyInputs(
        gaps_from_ledger(snap, records),
        records,
        ProviderHealth(config.policy.retry, random.Random(7)),
        Breakers.load(tmp_path, config.policy.breaker),
        now,
        month=month_spend(config, {"sim": log.facts}, now),
    )
    [decision] = scale_out(config, inputs)
    return decision


@pytest.fixture
def log() -> FactLog:
    """90 hours of one instance early in March 2026 (90 of the 100 spent)."""
    log = FactLog(FakeClock(at("2026-03-01T00:00:00")))
    [key] = log.intent("op-a", "sim", "cpu", 1)
    log.created(key, "sim", "cpu")
    log.clock.advance(90 * 3600)
    log.gone(key, "sim", "cpu")
    return log


def test_under_the_month_cap_it_launches(log: FactLog, tmp_path: Path) -> None:
    log.clock.now = at("2026-03-31T12:00:00")
    month = month_spend(site(SITE), {"sim": log.facts}, log.clock.now)
    assert month is not None and month.spent == {"batch": pytest.approx(90.0)}
    decision = decide(log, tmp_path, 3)  # 90 + 3 × 1.0 for an hour ≤ 100
    assert sum(op.count for op in decision.ops) == 3


def test_a_launch_past_the_month_cap_is_refused_with_reason_budget(log: FactLog, tmp_path: Path) -> None:
    log.clock.now = at("2026-03-31T11:00:00")
    keys = log.intent("op-b", "sim", "cpu", 8)
    for key in keys:
        log.created(key, "sim", "cpu")
    log.clock.now = at("2026-03-31T12:00:00")  # 90 + 8 spent; 8/h for the next hour: 106 > 100
    decision = decide(log, tmp_path, 1)
    assert decision.ops == ()
    [reason] = reasons_of(decision)
    assert reason.code == "budget"
    assert reason.detail == (
        "group month budget: group batch spent 98.0 this month + 8.0/h for 1.0 h of budget 100.0/month"
    )


def test_the_last_hour_looks_ahead_to_the_months_end_and_the_next_month_starts_from_nothing(
    log: FactLog, tmp_path: Path
) -> None:
    config = site(SITE)
    log.clock.now = at("2026-03-31T22:30:00")
    for key in log.intent("op-b", "sim", "cpu", 4):
        log.created(key, "sim", "cpu")
    log.clock.now = at("2026-03-31T23:30:00")  # 90 + 4 spent, 4/h for the half hour left: room for 8
    month = month_spend(config, {"sim": log.facts}, log.clock.now)
    assert month is not None and month.lookahead == pytest.approx(0.5)
    fits = room(config, Usage.of(config, list(ledger(log.facts).values()), month=month), "sim", "cpu")
    assert (fits.fits, fits.limit) == (8, "group month budget")
    log.clock.now = at("2026-04-01T00:30:00")  # April: 2 spent, 4/h: room for 94 (max_instances binds)
    month = month_spend(config, {"sim": log.facts}, log.clock.now)
    assert month is not None and month.spent == {"batch": pytest.approx(2.0)}
    decision = decide(log, tmp_path, 3)
    assert decision.outcome == "ops"  # the whole gap (hosts not joined by their deadline too)
    [entry] = decision.evidence["providers"]
    assert entry["room"]["limit"] == "max_instances"


def test_month_of_is_the_calendar_month_in_utc() -> None:
    assert month_of(at("2026-12-31T23:59:59")) == (at("2026-12-01T00:00:00"), at("2027-01-01T00:00:00"))
    assert month_of(at("2026-02-01T00:00:00")) == (at("2026-02-01T00:00:00"), at("2026-03-01T00:00:00"))


def test_no_budget_per_month_reads_no_month() -> None:
    config = site(SITE.replace("{per_month: 100}", "{per_hour: 5}"))
    assert month_spend(config, {}, at("2026-03-31T12:00:00")) is None


def test_warm_pool_fills_and_starts_are_held_by_the_month_cap(log: FactLog, tmp_path: Path) -> None:
    text = SITE.replace("per_month: 100", "per_month: 90.8")
    config = site(text.replace("cost_per_hour: 1.0}", "cost_per_hour: 1.0, stopped_cost_per_hour: 0.5, warm_pool: 2}"))
    log.clock.now = at("2026-03-31T12:00:00")
    log.pool("op-fill", "sim", "cpu", 1)  # 90 spent, 0.5/h stopped; one more: + 0.5 for an hour > 90.8

    def inputs(wanted: int) -> PolicyInputs:
        now = log.clock.now
        records = list(ledger(log.facts).values())
        snap = DemandSnapshot(seq=1, time=now, templates=(TemplateDemand("cpu", wanted),))
        health = ProviderHealth(config.policy.retry, random.Random(7))
        breakers = Breakers.load(tmp_path, config.policy.breaker)
        month = month_spend(config, {"sim": log.facts}, now)
        return PolicyInputs(gaps_from_ledger(snap, records), records, health, breakers, now, month=month)

    assert refills(config, inputs(0), {}) == []
    assert takes(config, inputs(1)) == []  # a start adds 1.0 - 0.5 per hour: past the cap too
    assert refills(config, replace(inputs(0), month=None), {}) == [OpRequest("cpu", "sim", 1, 1)]
    assert len(takes(config, replace(inputs(1), month=None))) == 1


def test_the_loop_reads_the_month_from_the_facts(tmp_path: Path) -> None:
    """Through the real pass: the month's spend is read from the facts and holds the launch."""
    text = TF_SITE.format(cluster="unit", state=tmp_path / "state").replace(
        "  cpu:\n    providers:", "  cpu:\n    xce: {host_groups: [batch]}\n    providers:"
    )
    loaded = parse_config(text + "policy: {group_budgets: {batch: {per_month: 1.2}}}\n", "site.yaml", tmp_path)
    reconciler, view, facts, _ = build(loaded, FakeEngine(), stamped=True)
    view.want(cpu=3)
    report = reconciler.run_once()
    created = [f for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    assert len(created) == 2  # 2 × 0.5 for an hour fits 1.2, a third does not
    launched, held = report.reasons["cpu"]
    assert (launched.code, launched.count) == ("launched", 2)
    assert (held.code, held.detail) == (
        "budget",
        "group month budget: group batch spent 0.0 this month + 0.0/h for 1.0 h of budget 1.2/month",
    )
