"""Orphans in the cost ledger (``reconcile/orphancosts.py``, docs/cost.md "Orphans"): an adopted
one is an item of op ``orphan:<id>`` from its listed launch time; a reported one is apart, with
an estimate only when its launch time and price are known."""

from __future__ import annotations

import json

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.model.facts import FactKind
from orchestrator.reconcile.orphancosts import orphan_costs

SITE = """
providers:
  sim: {module: xcesim, max_instances: 10}
templates:
  cpu:
    xce: {host_groups: [batch]}
    providers:
      sim: {flavor: c8, image: baked, cost_per_hour: 3.6}
"""
LAUNCHED = "1970-01-12T13:30:00Z"  # 999_000: 1000 s before the clock's start


def orphan(log: FactLog, kind: FactKind, cloud_id: str, template: str = "cpu", launched: str = LAUNCHED) -> None:
    detail = json.dumps({"class": "b", "launch_time": launched} if launched else {"class": "b"})
    common = {"instance_key": cloud_id, "instance_id": cloud_id, "template": template}
    log._commit(kind, "sim", "orphans", detail=detail, **common)


def test_an_adopted_orphan_costs_from_its_listed_launch_under_op_orphan() -> None:
    log = FactLog(FakeClock())
    orphan(log, FactKind.ORPHAN_REPORTED, "i-a")
    log.clock.advance(100)
    orphan(log, FactKind.ORPHAN_ADOPTED, "i-a")
    items, unowned = orphan_costs(site(SITE), {"sim": log.facts}, 0, log.clock.now + 900)
    [item] = items
    assert (item.op_id, item.template, item.groups, item.end) == ("orphan:i-a", "cpu", ("batch",), None)
    assert item.start == 999_000 and item.running_seconds == 2000 and item.cost == pytest.approx(2.0)
    assert unowned == []  # adopted: no longer unowned


def test_a_reported_orphan_is_apart_with_an_estimate_only_when_it_can_be_made() -> None:
    log = FactLog(FakeClock())
    orphan(log, FactKind.ORPHAN_REPORTED, "i-b")
    orphan(log, FactKind.ORPHAN_REPORTED, "i-c", launched="")
    orphan(log, FactKind.ORPHAN_REPORTED, "i-d", template="unknown")
    items, unowned = orphan_costs(site(SITE), {"sim": log.facts}, 0, log.clock.now + 1000)
    assert items == []
    by_id = {u.instance_id: u for u in unowned}
    assert by_id["i-b"].estimated_cost == pytest.approx(2.0) and by_id["i-b"].launched == 999_000
    assert by_id["i-c"].estimated_cost is None and by_id["i-d"].estimated_cost is None
    assert by_id["i-b"].to_json()["reported"] == 1_000_000
