"""Which hosts to drain and return: idle ones, old ones, closed ones; each with its evidence.

A pure selection over the ledger (this orchestrator's live instances), the controller's hosts
and the time ``now`` (wall seconds, the controller's clock):

* **idle**: the controller says ``idle`` since at least the provider's ``idle_time`` and the
  instance is older than its ``hold_time`` (from its ``instanceCreated`` fact: a host paid by
  the hour is kept for the hour it was bought for; a host started from a warm pool, from the
  ``expectedHost`` fact of its start: it is paid as a running host from then);
* **lifetime**: due under the provider's ``max_lifetime`` (:mod:`.lifetime`), whatever its state:
  busy hosts are drained first, never cut;
* **closed**: closed at the controller and running no work (a drain that finished, or one an
  earlier pass started on a host that had turned busy). The controller has no reopen: a closed
  host never gets work again, so keeping it only costs.

A host with an interruption notice (``InstanceRecord.noticed``, or the controller's
``reclaim_at``) is none of these: the cloud reclaims it at its time, and the loss is recorded
then (docs/daemon.md, "Spot interruption notices"). Past its reclaim time by
``noticebook.RECLAIM_GRACE`` without a reclaim, the notice no longer holds it (``leaving_keys``):
it is a closed host like any other.

The controller nets idle hosts out of its demand, so an idle host past ``idle_time`` is supply
nobody asked for. Whether a chosen host is really returned is decided at the close: a host that
turned busy in between answers ``closing`` and is kept (the loop does that, not this module).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.clients.controller.types import HostInfo
from orchestrator.model.config import Config
from orchestrator.reconcile.ledger import InstanceRecord
from orchestrator.reconcile.lifetime import lifetime_candidates


@dataclass(frozen=True)
class ReclaimCandidate:
    """One host chosen for drain and return, and why."""

    key: str
    provider: str
    template: str
    host_name: str
    reason: str  # "idle" | "lifetime" | "closed"
    state: str  # the controller's state of the host ("" when it does not know it)
    idle_since: float
    age: float
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The status document's entry: host, provider, key, reason, idle_since, age (and more)."""
        return {
            "host": self.host_name,
            "provider": self.provider,
            "key": self.key,
            "template": self.template,
            "reason": self.reason,
            "state": self.state,
            "idle_since": self.idle_since or None,
            "age": round(self.age, 3),
            "evidence": dict(self.evidence),
        }


def hosts_by_key(hosts: Iterable[HostInfo]) -> dict[str, HostInfo]:
    """The controller's hosts by instance key and by instance id (either finds a ledger record)."""
    out: dict[str, HostInfo] = {}
    for host in hosts:
        for ref in (host.instance_key, host.instance_id):
            if ref:
                out.setdefault(ref, host)
    return out


def host_of(record: InstanceRecord, known: Mapping[str, HostInfo]) -> HostInfo | None:
    """The controller's host of ``record``, by key first, then instance id."""
    return known.get(record.key) or (known.get(record.instance_id) if record.instance_id else None)


def reclaim_candidates(
    config: Config, records: Iterable[InstanceRecord], hosts: Sequence[HostInfo], now: float
) -> list[ReclaimCandidate]:
    """Every live host to drain and return now, lifetime first (oldest first), then by key."""
    # A host with an interruption notice is left to the cloud's reclaim (the loss is recorded
    # then): the scheduler's checkpoint window is the notice's lead, and a cloud may not bill the
    # partial hour of an instance it interrupted (EC2 Spot) but does one its owner terminated.
    live = [
        r
        for r in records
        if not r.gone and r.created is not None and r.provider in config.providers and r.noticed is None
    ]
    known = hosts_by_key(hosts)
    by_key = {r.key: r for r in live}
    out: dict[str, ReclaimCandidate] = {}
    for due in lifetime_candidates(config, live, now):
        host = host_of(by_key[due.key], known)
        out[due.key] = ReclaimCandidate(
            due.key,
            due.provider,
            due.template,
            due.host_name or (host.host_name if host else ""),
            "lifetime",
            host.state if host else "",
            host.idle_since if host else 0.0,
            due.age,
            {**due.evidence, "overdue": due.overdue},
        )
    for record in sorted(live, key=lambda r: r.key):
        if record.key in out or record.created is None:
            continue
        host = host_of(record, known)
        if host is None or host.reclaim_at > 0:  # noticed (by another orchestrator too): the cloud's
            continue
        # A pool host runs (and is paid as running) from its start, not from its launch.
        age = now - (record.expected if record.pool and record.expected is not None else record.created)
        name = record.host_name or host.host_name
        if host.state == "closed":
            evidence = {"state": "closed", "age": round(age, 3)}
            out[record.key] = ReclaimCandidate(
                record.key, record.provider, record.template, name, "closed", "closed", host.idle_since, age, evidence
            )
            continue
        if host.state != "idle" or host.idle_since <= 0:
            continue
        settings = config.providers[record.provider]
        idle_for = now - host.idle_since
        if idle_for < settings.idle_time or age < settings.hold_time:
            continue
        evidence = {
            "state": "idle",
            "idle_since": host.idle_since,
            "idle_for": round(idle_for, 3),
            "idle_time": settings.idle_time,
            "launched": record.created,
            "age": round(age, 3),
            "hold_time": settings.hold_time,
        }
        out[record.key] = ReclaimCandidate(
            record.key, record.provider, record.template, name, "idle", "idle", host.idle_since, age, evidence
        )
    return list(out.values())
