"""What this orchestrator's facts say about its instances: one pass over the facts, no I/O.

Every create op has a ``requestIntent`` for ``count`` instances keyed ``<op_id>-<index>``; each
key then gets ``instanceCreated`` and ``expectedHost`` facts, and at its end ``returned`` or
``lost``. An abandoned create (resume found nothing reached the cloud) records its keys
``returned`` too. The gap, the budget and the lifetime selection all read this one ledger, so
they count the same instances.

Warm-pool instances (docs/daemon.md, "The warm pool") are keys of an op whose intent fills a
pool (:data:`~orchestrator.model.pool.FILL_DETAIL`): they wait stopped (``in_pool``), are not
hosts on their way (not ``awaited``) and cost their stopped price, until a start op's intent
names them (``taken``): from then on they are awaited like any new host until their
``expectedHost`` fact of the start op.

Each key is on the offering its op's intent placed it on (``detail``
:func:`~orchestrator.model.offerings.placement_detail`, in key order); a key of an intent that
names none (a warm-pool fill, an op of old) is on its template's default offering on the
provider (``defaults``; "" when the caller gave none: the budget reads "" as the default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.offerings import offering_at, placements_of
from orchestrator.model.pool import FILL_DETAIL, start_keys

_NO_DEFAULTS: Mapping[tuple[str, str], str] = MappingProxyType({})


@dataclass(frozen=True)
class InstanceRecord:
    """One instance key of a create op, as far as the facts go."""

    key: str
    op_id: str
    provider: str
    template: str
    intent_committed: float
    # When the instanceCreated / expectedHost facts were committed (None: not yet).
    created: float | None = None
    expected: float | None = None
    instance_id: str = ""
    host_name: str = ""
    gone: bool = False
    # Launched into a warm pool, and taken out of it by a start op (its intent committed).
    pool: bool = False
    taken: bool = False
    # The offering it was placed on (its intent's detail; the default offering when none).
    offering: str = ""
    # An interruption notice was acted on (the controller's time of it; 0.0: not acknowledged):
    # the host is leaving, no more supply (reconcile/noticebook.py). None: no notice.
    noticed: float | None = None

    @property
    def in_pool(self) -> bool:
        """Waiting stopped in its template's warm pool (or on its way there): not a host yet."""
        return self.pool and not self.taken and not self.gone

    @property
    def awaited(self) -> bool:
        """Committed, not gone, not waiting in a pool and not yet recorded as an expected host:
        hosts still to come."""
        return not self.gone and self.expected is None and not self.in_pool and self.noticed is None

    @property
    def counted(self) -> bool:
        """Live or in flight: it costs money and takes room until it is gone."""
        return not self.gone


def ledger(facts: Iterable[Fact], defaults: Mapping[tuple[str, str], str] = _NO_DEFAULTS) -> dict[str, InstanceRecord]:
    """Instance key → record, for every key of every create op in ``facts``; ``defaults``:
    (provider, template) → the name of its default offering
    (:func:`~orchestrator.reconcile.offers.default_names`)."""
    ordered = sorted(facts, key=lambda f: (f.fact_id, f.committed))
    records: dict[str, InstanceRecord] = {}
    taken: set[str] = set()
    for fact in ordered:
        if fact.kind == FactKind.REQUEST_INTENT:
            pool = fact.detail == FILL_DETAIL
            taken.update(start_keys(fact.detail) or ())
            placed = placements_of(fact.detail)
            default = defaults.get((fact.provider, fact.template), "")
            for index in range(fact.count):
                key = instance_key(fact.op_id, index)
                offering = offering_at(placed, index, default)
                made = InstanceRecord(
                    key, fact.op_id, fact.provider, fact.template, fact.committed, pool=pool, offering=offering
                )
                records.setdefault(key, made)
    # What the later facts change, per key, applied once at the end (one copy of each record,
    # not one per fact: a pass reads the ledger several times over every fact).
    changes: dict[str, dict[str, Any]] = {}
    for fact in ordered:
        record = records.get(fact.instance_key)
        if record is None:
            continue  # an instance of no create op we know (adopted orphan): not ours to count
        change = changes.setdefault(record.key, {})
        if fact.kind == FactKind.INSTANCE_CREATED:
            change.update(created=fact.committed, instance_id=fact.instance_id, host_name=fact.host_name)
        elif fact.kind == FactKind.EXPECTED_HOST:
            change.update(
                expected=fact.committed, host_name=fact.host_name or change.get("host_name", record.host_name)
            )
        elif fact.kind in GONE_KINDS:
            change["gone"] = True
    for key in taken & set(records):
        changes.setdefault(key, {})["taken"] = True
    for key, change in changes.items():
        if change:
            records[key] = replace(records[key], **change)
    return records
