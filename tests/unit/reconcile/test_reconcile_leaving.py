"""A host with an interruption notice is leaving: the gap counts it out until the snapshot does."""

from __future__ import annotations

from dataclasses import replace

from reconcile_support import FactLog, FakeClock

from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.ledger import InstanceRecord, ledger


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
