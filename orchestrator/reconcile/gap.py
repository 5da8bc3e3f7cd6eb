"""Demand, exactly: how many more hosts of each template to ask for, with the numbers why.

``gap = wanted − (in_flight + awaited + unreflected − leaving)`` per template, never below zero, where

* ``wanted`` and ``in_flight`` are the snapshot's: the controller already nets idle hosts out of
  ``wanted``, and ``in_flight`` counts its expected hosts that have not joined (and are not
  overdue);
* ``awaited`` counts the instance keys of this orchestrator's create ops (``requestIntent``)
  that are neither recorded as expected hosts nor gone: committed hosts the controller cannot
  know about yet;
* ``unreflected`` counts expected hosts whose fact was committed *after* the snapshot was
  taken (``fact.committed > snapshot.time``, both the controller's clock): the snapshot's
  ``in_flight`` does not hold them yet, and without this term an old snapshot read after a
  fresh ``expectedHost`` fact would ask for those hosts a second time;
* ``leaving`` counts hosts of this orchestrator with an interruption notice acted on
  (``noticebook.py``) that the snapshot does not reflect: noticed after the snapshot was taken
  (both the controller's clock), so it may still count them idle (netted out of ``wanted``) or in
  flight. A noticed host not yet an expected host is simply not awaited (``ledger.awaited``).

A gap is never negative: demand that falls while an op is in flight does not cancel the op
(its hosts join, go idle and are reclaimed like any other), and ``surplus`` says by how much
the supply on its way exceeds the demand. Every number is in the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.demand import DemandSnapshot
from orchestrator.model.facts import Fact
from orchestrator.reconcile.ledger import InstanceRecord, ledger


@dataclass(frozen=True)
class TemplateGap:
    """The gap of one template and what it was computed from."""

    template: str
    wanted: int
    in_flight: int
    awaited: int
    unreflected: int
    # op id → hosts of that op still awaited (committed, not yet expected hosts).
    awaited_by_op: Mapping[str, int] = field(default_factory=dict)
    # Hosts with an interruption notice the snapshot does not reflect yet (noticed after it was
    # taken, or unknown to the controller): the snapshot may still count them as idle or in
    # flight, but they are leaving.
    leaving: int = 0

    @property
    def supply(self) -> int:
        """Hosts on their way: the controller's in flight plus those only the facts know of,
        less the hosts leaving (an interruption notice)."""
        return max(0, self.in_flight + self.awaited + self.unreflected - self.leaving)

    @property
    def gap(self) -> int:
        """More hosts to ask for (never negative)."""
        return max(0, self.wanted - self.supply)

    @property
    def surplus(self) -> int:
        """Hosts on their way beyond the demand (kept: they are reclaimed once idle)."""
        return max(0, self.supply - self.wanted)

    def evidence(self) -> dict[str, Any]:
        """JSON-ready numbers for the audit log."""
        return {
            "template": self.template,
            "wanted": self.wanted,
            "in_flight": self.in_flight,
            "awaited": self.awaited,
            "unreflected": self.unreflected,
            "awaited_by_op": dict(sorted(self.awaited_by_op.items())),
            "leaving": self.leaving,
            "gap": self.gap,
            "surplus": self.surplus,
        }


def gaps(snapshot: DemandSnapshot, facts: Iterable[Fact]) -> dict[str, TemplateGap]:
    """The gap of every template the snapshot or this orchestrator's create ops name, by name."""
    return gaps_from_ledger(snapshot, ledger(facts).values())


def gaps_from_ledger(snapshot: DemandSnapshot, records: Iterable[InstanceRecord]) -> dict[str, TemplateGap]:
    """:func:`gaps` over an already built ledger (the pass builds it once for gap and budget)."""
    awaited: dict[str, dict[str, int]] = {}
    unreflected: dict[str, int] = {}
    leaving: dict[str, int] = {}
    for record in records:
        if record.noticed is not None and not record.gone and _unreflected_notice(record, snapshot):
            leaving[record.template] = leaving.get(record.template, 0) + 1
        if record.awaited:
            by_op = awaited.setdefault(record.template, {})
            by_op[record.op_id] = by_op.get(record.op_id, 0) + 1
        elif not record.gone and record.expected is not None and _after(record.expected, snapshot):
            unreflected[record.template] = unreflected.get(record.template, 0) + 1
    demand = {t.template: t for t in snapshot.templates}
    out: dict[str, TemplateGap] = {}
    for name in sorted(set(demand) | set(awaited) | set(unreflected) | set(leaving)):
        seen = demand.get(name)
        by_op = awaited.get(name, {})
        out[name] = TemplateGap(
            template=name,
            wanted=seen.wanted if seen is not None else 0,
            in_flight=seen.in_flight if seen is not None else 0,
            awaited=sum(by_op.values()),
            unreflected=unreflected.get(name, 0),
            awaited_by_op=by_op,
            leaving=leaving.get(name, 0),
        )
    return out


def _unreflected_notice(record: InstanceRecord, snapshot: DemandSnapshot) -> bool:
    """Whether the snapshot can still count the noticed host as supply: the controller took the
    notice after the snapshot (or never acknowledged it), or the host is one of ours only the
    facts know of (not yet an expected host: the controller has no record to count it out of)."""
    if record.expected is None:
        return False  # not awaited any more (ledger.awaited): already out of the supply
    return not record.noticed or snapshot.time <= 0 or record.noticed > snapshot.time


def _after(committed: float, snapshot: DemandSnapshot) -> bool:
    # A snapshot without a time (0) cannot be placed against facts; its in_flight is trusted.
    return snapshot.time > 0 and committed > snapshot.time
