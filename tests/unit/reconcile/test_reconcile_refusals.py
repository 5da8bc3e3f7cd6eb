"""The memory of refusals: backoff per offering and per quota, clearing, expiry, a bad document,
several writers, a restart; and what a failed or successful create op records in it."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
from reconcile_support import FactLog, FakeClock, site

from orchestrator.errors import CapacityRefused, QuotaRefused
from orchestrator.model.facts import FactKind
from orchestrator.model.offerings import Placement, placement_detail
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.classify import classify_error
from orchestrator.reconcile.refusals import REFUSALS_FILE, RefusalMemory
from orchestrator.reconcile.refusedops import (
    key_placements,
    op_hold,
    quota_freed,
    record_refusal,
    record_success,
)
from orchestrator.workspace.documents import LocalDocuments

SITE = """
policy:
  capacity_backoff: {base: 60s, max: 30m}
  quota_backoff: {base: 10m, max: 2h}
providers:
  sim: {module: xcesim}
templates:
  cpu:
    providers:
      sim:
        image: deb
        offerings:
          - {flavor: c8, zone: a, cost_per_hour: 1}
          - {flavor: c8, zone: b, cost_per_hour: 1, name: c8-second}
  small:
    providers:
      sim: {flavor: c8, image: deb}
"""
NOW = 1_800_000_000.0


def memory(root: Path, seed: int = 1) -> RefusalMemory:
    return RefusalMemory.load(LocalDocuments(root), site(SITE).policy, random.Random(seed))


def test_capacity_backoff_doubles_per_refusal_and_is_capped(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    holds = []
    for _ in range(8):
        record = mem.refused("sim", "c8@a", "capacity", "InsufficientCapacity", NOW)
        holds.append(record.until - NOW)
    ceilings = [min(1800.0, 60.0 * 2**n) for n in range(8)]
    assert all(c / 2 <= h <= c for h, c in zip(holds, ceilings, strict=True)), holds
    assert max(holds) <= 1800.0 and holds[-1] >= 900.0  # capped at max, jitter at most half
    assert mem.capacity("sim", "c8@a", NOW) == pytest.approx(NOW + holds[-1])
    assert mem.capacity("sim", "c8@b", NOW) is None  # another placement is free
    assert mem.capacity("sim", "c8@a", NOW + 1800.0) is None  # past the longest hold: probed again
    # The same seed gives the same holds (the loop's random source decides the jitter).
    again = memory(tmp_path / "again")
    assert [again.refused("sim", "c8@a", "capacity", "x", NOW).until - NOW for _ in range(8)] == holds


def test_quota_holds_longer_and_is_named_quota(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    capacity = mem.refused("sim", "c8@a", "capacity", "no room", NOW)
    quota = mem.refused("sim", "c8@b", "quota", "VcpuLimitExceeded: you asked for more vCPU", NOW)
    assert capacity.until - NOW <= 60.0 < 300.0 <= quota.until - NOW <= 600.0
    assert mem.quota("sim", NOW) == quota.until and mem.quota("other", NOW) is None
    rows = [r.evidence() for r in mem.records(NOW)]
    assert [(r["scope"], r["provider"], r["placement"], r["failures"]) for r in rows] == [
        ("capacity", "sim", "c8@a", 1),
        ("quota", "sim", "", 1),
    ]
    assert rows[1]["text"].startswith("VcpuLimitExceeded")


def test_a_success_clears_the_offering_and_a_gone_instance_the_quota(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.refused("sim", "c8@a", "capacity", "no room", NOW)
    mem.refused("sim", "c8@b", "capacity", "no room", NOW)
    mem.succeeded("sim", "c8@a")
    assert mem.capacity("sim", "c8@a", NOW) is None and mem.capacity("sim", "c8@b", NOW) is not None
    # Quota: an instance the cloud made and that was returned after the refusal frees it; the
    # keys of the refused op itself (recorded returned without a creation) do not.
    clock = FakeClock(NOW)
    log = FactLog(clock)
    [old] = log.intent("op-old", "sim", "cpu", 1)
    log.created(old, "sim", "cpu")
    clock.advance(10)
    mem.refused("sim", "", "quota", "quota", clock.now)
    [refused] = log.intent("op-refused", "sim", "cpu", 1)
    clock.advance(1)
    log.gone(refused, "sim", "cpu")
    assert quota_freed(mem, {"sim": log.facts}) == [] and mem.quota("sim", clock.now) is not None
    log.gone(old, "sim", "cpu", FactKind.LOST)
    assert quota_freed(mem, {"sim": log.facts}) == ["sim"]
    assert mem.quota("sim", clock.now) is None
    assert memory(tmp_path).quota("sim", clock.now) is None  # cleared in the document, not only here


def test_records_expire_and_a_late_refusal_starts_from_base(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    for _ in range(4):
        record = mem.refused("sim", "c8@a", "capacity", "no room", NOW)
    later = record.until + 1800.0 + 1  # past its hold by more than capacity_backoff.max
    assert [r.placement for r in mem.records(later - 2)] == ["c8@a"]
    assert mem.records(later) == []
    mem.prune(later)
    assert json.loads((tmp_path / REFUSALS_FILE).read_text())["refusals"] == []
    again = mem.refused("sim", "c8@a", "capacity", "no room", later)
    assert again.failures == 1 and again.until - later <= 60.0


def test_a_malformed_document_is_read_as_untrusted_input(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = {
        "scope": "capacity",
        "provider": "sim",
        "placement": "c8@a",
        "failures": 2,
        "first": NOW,
        "last": NOW,
        "until": NOW + 100,
        "text": "no room",
    }
    bad = [
        {**good, "scope": "bogus"},
        {**good, "failures": "two"},
        {**good, "until": True},
        {**good, "placement": "../etc"},
        {**good, "scope": "quota"},  # a quota record names no placement
        "not a record",
    ]
    (tmp_path / REFUSALS_FILE).write_text(json.dumps({"format": 1, "refusals": [*bad, good]}))
    with caplog.at_level(logging.WARNING, "orchestrator.reconcile.refusals"):
        mem = memory(tmp_path)
        mem.refresh()  # read again: not logged again
    assert [r.placement for r in mem.records(NOW)] == ["c8@a"]
    assert mem.capacity("sim", "c8@a", NOW) == NOW + 100
    dropped = [r.getMessage() for r in caplog.records]
    assert len(dropped) == len(bad) and all("refusal record" in line for line in dropped)
    assert "scope 'bogus'" in dropped[0] and "failures 'two'" in dropped[1]
    # A document that is not one at all: empty, one line, and the next refusal writes a good one.
    caplog.clear()
    (tmp_path / REFUSALS_FILE).write_text("{ not json")
    with caplog.at_level(logging.WARNING, "orchestrator.reconcile.refusals"):
        mem.refresh()
        assert mem.records(NOW) == []
        mem.refused("sim", "c8@b", "capacity", "no room", NOW)
    assert len(caplog.records) == 1 and "not read" in caplog.records[0].getMessage()
    assert [r["placement"] for r in json.loads((tmp_path / REFUSALS_FILE).read_text())["refusals"]] == ["c8@b"]


def test_two_memories_over_one_document_keep_each_others_records(tmp_path: Path) -> None:
    one, two = memory(tmp_path, 1), memory(tmp_path, 2)  # both read the empty document first
    one.refused("sim", "c8@a", "capacity", "no room", NOW)
    two.refused("sim", "c8@b", "capacity", "no room", NOW)  # over the document, not its old copy
    two.refused("sim", "", "quota", "quota", NOW)
    one.succeeded("sim", "c8@a")
    one.refresh()
    assert [(r.scope, r.placement) for r in one.records(NOW)] == [("capacity", "c8@b"), ("quota", "")]
    # A restart (a new memory over the same directory) finds them.
    assert [(r.scope, r.placement) for r in memory(tmp_path, 3).records(NOW)] == [("capacity", "c8@b"), ("quota", "")]


def test_an_ops_keys_map_to_placements_by_its_intent_detail() -> None:
    config = site(SITE)
    detail = placement_detail([Placement("c8@a", 2), Placement("c8-second", 1)])
    keys = ["op-1-000", "op-1-001", "op-1-002", "op-1-003", "op-2-000"]
    assert key_placements(config, "sim", "cpu", "op-1", detail, keys) == {
        "op-1-000": "c8@a",
        "op-1-001": "c8@a",
        "op-1-002": "c8@b",  # the offering's name is c8-second: held by flavor and zone
        "op-1-003": "c8@a",  # past the placements: the default offering (the first listed)
        "op-2-000": "c8@a",  # not a key of the op: the default offering
    }
    # One flavor: every key on it; two templates naming the same flavor share its record.
    assert set(key_placements(config, "sim", "small", "op-1", "", keys).values()) == {"c8"}


def test_a_refused_op_records_each_refused_keys_placement_and_a_success_frees_them(tmp_path: Path) -> None:
    config = site(SITE)
    mem = memory(tmp_path)
    clock = FakeClock(NOW)
    log = FactLog(clock)
    detail = placement_detail([Placement("c8@a", 1), Placement("c8-second", 1)])
    log.intent("op-1", "sim", "cpu", 2, detail)
    [op] = open_ops(log.facts)
    refusal = CapacityRefused(
        "apply failed", "InsufficientCapacity", "InsufficientCapacity: c8 in b", {"op-1-001": "capacity"}
    )
    records = record_refusal(mem, config, "sim", op, refusal, classify_error(refusal), NOW)
    assert [(r.scope, r.placement) for r in records] == [("capacity", "c8@b")]
    assert op_hold(mem, config, "sim", op, "transient", NOW) == {
        "scope": "capacity",
        "provider": "sim",
        "placement": "c8@b",
        "until": records[0].until,
    }
    assert mem.capacity("sim", "c8@a", NOW) is None  # the other offering still has room
    # No key named: every key without an outcome is refused with the op's class.
    quota = QuotaRefused("apply failed", "VcpuLimitExceeded", "VcpuLimitExceeded")
    [held] = record_refusal(mem, config, "sim", op, quota, classify_error(quota), NOW)
    assert held.scope == "quota" and mem.quota("sim", NOW) == held.until  # every template, every offering
    record_success(mem, config, "sim", "cpu", "op-1", lambda: detail, lambda: ["op-1-001"])
    assert mem.capacity("sim", "c8@b", NOW) is None
