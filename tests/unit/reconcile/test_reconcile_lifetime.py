"""max_lifetime selection: hosts due for drain and return before the cloud's backstop ends them."""

from __future__ import annotations

from reconcile_support import FactLog, FakeClock, site

from orchestrator.model.facts import FactKind
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.lifetime import lifetime_candidates

SITE = """
policy: {lifetime_lead: 1h}
providers:
  aws: {module: xcesim, max_lifetime: 1d}
  onprem: {module: xcesim}
templates:
  cpu:
    providers:
      aws: {flavor: c8, image: deb}
      onprem: {flavor: c8, image: deb}
"""


def test_hosts_are_due_lifetime_minus_lead_after_launch() -> None:
    config = site(SITE)
    clock = FakeClock()
    log = FactLog(clock)
    old, young, gone = log.intent("op-a", "aws", "cpu", 3)
    log.created(old, "aws", "cpu")
    clock.advance(3600)
    log.created(young, "aws", "cpu")
    log.created(gone, "aws", "cpu")
    log.gone(gone, "aws", "cpu", FactKind.LOST)
    (other,) = log.intent("op-b", "onprem", "cpu", 1)
    log.created(other, "onprem", "cpu")  # no max_lifetime on onprem: never chosen
    records = ledger(log.facts).values()

    clock.advance(86400 - 2 * 3600 - 1)  # old is 23h − 1s old
    assert lifetime_candidates(config, records, clock.now) == []
    clock.advance(1)
    (first,) = lifetime_candidates(config, records, clock.now)
    assert (first.key, first.overdue, first.host_name) == (old, False, f"h-{old}")
    assert first.evidence["cloud_ends_at"] == first.evidence["launched"] + 86400
    clock.advance(3600)  # old is past its lifetime (the backstop did not end it), young is due
    keys = [(c.key, c.overdue) for c in lifetime_candidates(config, records, clock.now)]
    assert keys == [(old, True), (young, False)]


def test_hosts_not_yet_created_are_not_candidates() -> None:
    config = site(SITE)
    clock = FakeClock()
    log = FactLog(clock)
    log.intent("op-a", "aws", "cpu", 2)
    clock.advance(10 * 86400)
    assert lifetime_candidates(config, ledger(log.facts).values(), clock.now) == []
