"""The cost ledger's arithmetic (``model/costs.py``, ``reconcile/costs.py``): per second, at the
offering's price, the warm pool at its stopped price, group attribution, period clipping."""

from __future__ import annotations

import json

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.model.costs import ended_time_of, launch_detail, launch_time_of, totals
from orchestrator.model.facts import FactKind
from orchestrator.model.offerings import Placement, placement_detail
from orchestrator.reconcile.costs import cost_items, spend_rate

SITE = """
providers:
  sim: {module: xcesim, max_instances: 10}
  other: {module: xcesim, max_instances: 10}
templates:
  cpu:
    xce: {host_groups: [batch, short]}
    providers:
      sim:
        image: baked
        cost_per_hour: 3.6
        stopped_cost_per_hour: 0.36
        offerings:
          - {flavor: c8, cost_per_hour: 3.6}
          - {flavor: c4, cost_per_hour: 1.8}
  gpu:
    providers:
      other: {flavor: g4, image: baked, cost_per_hour: 7.2}
"""


@pytest.fixture
def log() -> FactLog:
    return FactLog(FakeClock())


def test_an_instance_costs_its_offering_price_per_second_from_launch_to_its_return(log: FactLog) -> None:
    config = site(SITE)
    t0 = log.clock.now
    [a, b] = log.intent("op-1", "sim", "cpu", 2, placement_detail([Placement("c8", 1), Placement("c4", 1)]))
    log.clock.advance(10)
    log.created(a, "sim", "cpu")
    log.created(b, "sim", "cpu")
    log.clock.advance(100)
    log.gone(a, "sim", "cpu")
    log.clock.advance(100)
    log.gone(b, "sim", "cpu", FactKind.LOST)
    items = cost_items(config, {"sim": log.facts}, 0, t0 + 1000)
    by_key = {i.key: i for i in items}
    assert by_key[a].running_seconds == 100 and by_key[a].cost == pytest.approx(0.1)  # 3.6/h × 100 s
    assert by_key[b].running_seconds == 200 and by_key[b].cost == pytest.approx(0.1)  # 1.8/h × 200 s
    assert by_key[a].offering == "c8" and by_key[b].offering == "c4" and by_key[a].op_id == "op-1"


def test_the_start_is_the_clouds_launch_time_carried_by_the_fact(log: FactLog) -> None:
    config = site(SITE)
    [key] = log.intent("op-1", "sim", "cpu", 1)
    launched = "1970-01-12T14:03:10Z"  # 1_000_990: ten seconds before the fact's commit
    log.clock.advance(1000)
    common = {"instance_key": key, "instance_id": "i-1", "template": "cpu", "host_name": "h"}
    log._commit(FactKind.INSTANCE_CREATED, "sim", "op-1", detail=launch_detail({"launch_time": launched}), **common)
    log.clock.advance(90)
    log.gone(key, "sim", "cpu")
    [item] = cost_items(config, {"sim": log.facts}, 0, log.clock.now)
    assert item.start == 1_000_990 and item.running_seconds == 100
    assert launch_time_of("") is None and launch_time_of('{"launch_time": "bad"}') is None


def test_a_loss_ends_at_the_clouds_termination_time_when_the_listing_gave_it(log: FactLog) -> None:
    config = site(SITE)
    [a, b] = log.intent("op-1", "sim", "cpu", 2)
    log.created(a, "sim", "cpu")
    log.created(b, "sim", "cpu")
    ended = "1970-01-12T13:58:20Z"  # 1_000_700: 700 s after the launch, 300 s before the fact
    log.clock.advance(1000)
    listing = {"reason": "spot-reclaim", "listing": {"state": "terminated", "terminated_at": ended}}
    common = {"instance_key": a, "template": "cpu"}
    log._commit(FactKind.LOST, "sim", "op-1", detail=json.dumps(listing), **common)
    log.gone(b, "sim", "cpu", FactKind.LOST)  # no time from the cloud: the fact's commit time
    by_key = {i.key: i for i in cost_items(config, {"sim": log.facts}, 0, log.clock.now + 10)}
    assert by_key[a].end == 1_000_700 and by_key[a].running_seconds == 700
    assert by_key[b].end == 1_001_000 and by_key[b].running_seconds == 1000
    assert ended_time_of("") is None and ended_time_of('{"listing": {"terminated_at": "bad"}}') is None


def test_a_warm_pool_instance_costs_its_stopped_price_until_taken(log: FactLog) -> None:
    config = site(SITE)
    [key] = log.pool("op-fill", "sim", "cpu", 1)
    log.clock.advance(1000)
    log.start("op-start", "sim", "cpu", [key])
    log.clock.advance(100)
    [item] = cost_items(config, {"sim": log.facts}, 0, log.clock.now)
    assert item.stopped_seconds == 1000 and item.running_seconds == 100
    assert item.cost == pytest.approx(0.36 * 1000 / 3600 + 3.6 * 100 / 3600)


def test_the_period_clips_and_a_live_instance_counts_up_to_until(log: FactLog) -> None:
    config = site(SITE)
    t0 = log.clock.now
    [key] = log.intent("op-1", "other", "gpu", 1)
    log.created(key, "other", "gpu")
    [item] = cost_items(config, {"other": log.facts}, t0 + 100, t0 + 200)
    assert item.running_seconds == 100 and item.end is None and item.cost == pytest.approx(0.2)
    assert cost_items(config, {"other": log.facts}, 0, t0 - 1) == []
    assert spend_rate(config, {"other": log.facts}) == {("other", "gpu"): 7.2}


def test_totals_by_group_count_an_instance_under_each_of_its_groups(log: FactLog) -> None:
    config = site(SITE)
    [cpu] = log.intent("op-1", "sim", "cpu", 1)
    log.created(cpu, "sim", "cpu")
    [gpu] = log.intent("op-2", "other", "gpu", 1)
    log.created(gpu, "other", "gpu")
    log.clock.advance(3600)
    items = cost_items(config, {"both": log.facts}, 0, log.clock.now)
    cpu_cost = 3.6
    assert totals(items, "group") == pytest.approx({"batch": cpu_cost, "short": cpu_cost, "-": 7.2})
    assert totals(items, "provider") == pytest.approx({"sim": cpu_cost, "other": 7.2})
    assert totals(items, "op") == pytest.approx({"op-1": cpu_cost, "op-2": 7.2})


def test_a_key_never_created_costs_nothing(log: FactLog) -> None:
    config = site(SITE)
    [key] = log.intent("op-1", "sim", "cpu", 1)
    log.clock.advance(100)
    log.gone(key, "sim", "cpu")
    assert cost_items(config, {"sim": log.facts}, 0, log.clock.now) == []


def test_the_cost_report_text_and_json_say_the_totals_and_the_group_overlap(log: FactLog) -> None:
    from orchestrator.services.cost import CostReport

    config = site(SITE)
    [cpu] = log.intent("op-1", "sim", "cpu", 1)
    log.created(cpu, "sim", "cpu")
    log.clock.advance(3600)
    items = cost_items(config, {"sim": log.facts}, 0, log.clock.now)
    by_group = CostReport(0, log.clock.now, "group", items)
    assert by_group.text().splitlines() == [
        "GROUP  COST",
        "batch  3.600000",
        "short  3.600000",
        "total 3.600000 over 1 instance(s)",
        "(an instance of a template in several host groups counts under each)",
    ]
    doc = by_group.to_json()
    assert doc["total"] == 3.6 and doc["groups_overlap"] is True and doc["totals"] == {"batch": 3.6, "short": 3.6}
    assert CostReport(0, log.clock.now, "provider", items).to_json()["groups_overlap"] is False
