"""What this orchestrator's facts say about its instances: one pass over the facts, no I/O.

Every create op has a ``requestIntent`` for ``count`` instances keyed ``<op_id>-<index>``; each
key then gets ``instanceCreated`` and ``expectedHost`` facts, and at its end ``returned`` or
``lost``. An abandoned create (resume found nothing reached the cloud) records its keys
``returned`` too. The gap, the budget and the lifetime selection all read this one ledger, so
they count the same instances.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key


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

    @property
    def awaited(self) -> bool:
        """Committed, not gone and not yet recorded as an expected host: hosts still to come."""
        return not self.gone and self.expected is None

    @property
    def counted(self) -> bool:
        """Live or in flight: it costs money and takes room until it is gone."""
        return not self.gone


def ledger(facts: Iterable[Fact]) -> dict[str, InstanceRecord]:
    """Instance key → record, for every key of every create op in ``facts``."""
    ordered = sorted(facts, key=lambda f: (f.fact_id, f.committed))
    records: dict[str, InstanceRecord] = {}
    for fact in ordered:
        if fact.kind == FactKind.REQUEST_INTENT:
            for index in range(fact.count):
                key = instance_key(fact.op_id, index)
                records.setdefault(key, InstanceRecord(key, fact.op_id, fact.provider, fact.template, fact.committed))
    for fact in ordered:
        record = records.get(fact.instance_key)
        if record is None:
            continue  # an instance of no create op we know (adopted orphan): not ours to count
        if fact.kind == FactKind.INSTANCE_CREATED:
            record = replace(record, created=fact.committed, instance_id=fact.instance_id, host_name=fact.host_name)
        elif fact.kind == FactKind.EXPECTED_HOST:
            record = replace(record, expected=fact.committed, host_name=fact.host_name or record.host_name)
        elif fact.kind in GONE_KINDS:
            record = replace(record, gone=True)
        records[record.key] = record
    return records
