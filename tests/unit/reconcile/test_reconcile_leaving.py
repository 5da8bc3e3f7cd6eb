"""A host with an interruption notice is leaving: the gap counts it out until the snapshot does."""

from __future__ import annotations

from dataclasses import replace

from reconcile_support import FactLog, FakeClock, site

from orchestrator.clients.controller.types import HostInfo
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.ledger import InstanceRecord, ledger
from orchestrator.reconcile.noticebook import RECLAIM_GRACE, NoticedHost, leaving_keys
from orchestrator.reconcile.reclaim import reclaim_candidates


def _records(noticed_at: float | None, expected: bool = True) -> tuple[list[InstanceRecord], float]:
    clock = FakeClock()
    log = FactLog(clock)
    keys = log.intent("op-1", "sim", "cpu", 2)
    for key in keys:
        log.created(key, "sim", "cpu", expected=expected)
    records = list(ledger(log.facts).values())
    if noticed_at is not None:
        records = [replace(r, noticed=noticed_at) if r.key == keys[0] else r for r in records]
    return records, clock.now


def test_a_notice_after_the_snapshot_takes_the_host_out_of_the_supply() -> None:
    records, now = _records(noticed_at=None)
    snapshot = DemandSnapshot(1, 1, now, (TemplateDemand("cpu", 2, in_flight=2),))
    assert gaps_from_ledger(snapshot, records)["cpu"].gap == 0
    noticed, _ = _records(noticed_at=now + 5)
    gap = gaps_from_ledger(snapshot, noticed)["cpu"]
    assert (gap.leaving, gap.gap) == (1, 1)
    assert gap.evidence()["leaving"] == 1


def test_a_snapshot_taken_after_the_notice_reflects_it_already() -> None:
    records, now = _records(noticed_at=None)
    noticed = [replace(r, noticed=now) if i == 0 else r for i, r in enumerate(records)]
    # The controller counted the noticed host out: in_flight 1 in a snapshot taken after the ack.
    later = DemandSnapshot(2, 1, now + 10, (TemplateDemand("cpu", 2, in_flight=1),))
    gap = gaps_from_ledger(later, noticed)["cpu"]
    assert (gap.leaving, gap.gap) == (0, 1)


def test_a_noticed_key_not_yet_expected_is_not_awaited() -> None:
    records, now = _records(noticed_at=1.0, expected=False)
    snapshot = DemandSnapshot(1, 1, now, (TemplateDemand("cpu", 2),))
    gap = gaps_from_ledger(snapshot, records)["cpu"]
    assert (gap.awaited, gap.leaving, gap.gap) == (1, 0, 1)


def test_a_noticed_host_is_left_to_the_cloud_s_reclaim_until_its_grace_passed() -> None:
    config = site(
        "providers:\n  sim: {module: xcesim}\ntemplates:\n  cpu:\n    providers:\n      sim: {flavor: c8, image: deb}\n"
    )
    clock = FakeClock()
    log = FactLog(clock)
    [key] = log.intent("op-a", "sim", "cpu", 1)
    log.created(key, "sim", "cpu")
    closed = HostInfo(f"h-{key}", "closed", instance_id=f"i-{key}", instance_key=key, provider="sim")
    [record] = ledger(log.facts).values()
    assert [c.reason for c in reclaim_candidates(config, [record], [closed], clock.now)] == ["closed"]
    # Noticed by this orchestrator (the ledger), or by any (the controller's reclaim time): kept.
    assert reclaim_candidates(config, [replace(record, noticed=clock.now)], [closed], clock.now) == []
    assert reclaim_candidates(config, [record], [replace(closed, reclaim_at=clock.now + 120)], clock.now) == []
    # The notice holds the host until its reclaim time and the grace after it.
    entry = NoticedHost("sim", f"i-{key}", "spot-interruption", clock.now, clock.now + 120, clock.now, key)
    assert leaving_keys([entry], clock.now + 120 + RECLAIM_GRACE - 1) == {key: 0.0}
    assert leaving_keys([entry], clock.now + 120 + RECLAIM_GRACE) == {}
    assert leaving_keys([replace(entry, lost_at=clock.now + 121)], clock.now + 130) == {}
