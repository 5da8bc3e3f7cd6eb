"""Hosts past their lifetime: drain-and-return candidates chosen by the orchestrator.

A provider's ``max_lifetime`` is enforced twice. The cloud backstop (owner tag, in-host shutdown,
``docs/configuration.md``) ends an instance at launch + ``max_lifetime`` whatever runs on it;
this selection is the orchestrator's graceful path before that: a host is a candidate from
launch + ``max_lifetime`` − ``policy.lifetime_lead``, so the reclaim phase can close it, let its
jobs finish and return it before the cloud's hard stop. A host already past its lifetime (the
backstop did not end it: Nova only stops a server) is a candidate too, and says so.

The launch time is the commit time of the ``instanceCreated`` fact: a little after the real
launch, so a host is chosen at most that little late, which the lead absorbs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.config import Config
from orchestrator.reconcile.ledger import InstanceRecord


@dataclass(frozen=True)
class LifetimeCandidate:
    """One live host to drain and return because of its age."""

    key: str
    provider: str
    template: str
    host_name: str
    age: float
    overdue: bool  # already past max_lifetime itself
    evidence: dict[str, Any] = field(default_factory=dict)


def lifetime_candidates(config: Config, records: Iterable[InstanceRecord], now: float) -> list[LifetimeCandidate]:
    """Live hosts of providers with ``max_lifetime`` that are due, oldest first."""
    lead = config.policy.lifetime_lead
    out: list[LifetimeCandidate] = []
    for record in records:
        settings = config.providers.get(record.provider)
        if record.gone or record.created is None or settings is None or settings.max_lifetime is None:
            continue
        lifetime = settings.max_lifetime
        due = record.created + max(0.0, lifetime - lead)
        if now < due:
            continue
        age = now - record.created
        out.append(
            LifetimeCandidate(
                record.key,
                record.provider,
                record.template,
                record.host_name,
                age,
                age >= lifetime,
                {
                    "launched": record.created,
                    "age": round(age, 3),
                    "max_lifetime": lifetime,
                    "lifetime_lead": lead,
                    "due": due,
                    "cloud_ends_at": record.created + lifetime,
                },
            )
        )
    return sorted(out, key=lambda c: (-c.age, c.key))
