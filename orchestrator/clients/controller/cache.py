"""What the link learned from the controller: the newest demand snapshot, facts and hosts."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostInfo


class LinkCache:
    """Thread-safe; every read returns a value the caller may keep (no shared mutable state)."""

    def __init__(self, providers: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._demand: DemandSnapshot | None = None
        self._facts: dict[str, list[Fact]] = {p: [] for p in providers}
        self._hosts: tuple[HostInfo, ...] = ()

    def demand(self) -> DemandSnapshot | None:
        """The newest demand snapshot seen (by ``(term, seq)``)."""
        with self._lock:
            return self._demand

    def offer_demand(self, snapshot: DemandSnapshot) -> bool:
        """Keep ``snapshot`` when it is newer than the one held; whether it was kept."""
        with self._lock:
            if self._demand is not None and snapshot.order() <= self._demand.order():
                return False  # level-triggered: only a newer picture replaces the one we have
            self._demand = snapshot
            return True

    def facts(self, provider: str) -> list[Fact]:
        """The provider's facts as of the last resync plus the commits made since."""
        with self._lock:
            return list(self._facts.get(provider, []))

    def resynced(self, facts: Mapping[str, list[Fact]], hosts: Iterable[HostInfo]) -> None:
        """Replace the facts of the providers in ``facts`` and all hosts (after a resync)."""
        with self._lock:
            self._facts.update({p: list(f) for p, f in facts.items()})
            self._hosts = tuple(hosts)

    def committed(self, fact: Fact) -> None:
        """Add a fact this instance committed (once per ``fact_id``)."""
        with self._lock:
            known = self._facts.setdefault(fact.provider, [])
            if all(f.fact_id != fact.fact_id for f in known):
                known.append(fact)

    def hosts(self) -> tuple[HostInfo, ...]:
        """Hosts as of the last resync."""
        with self._lock:
            return self._hosts
