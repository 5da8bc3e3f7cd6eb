"""Which provider may be asked for which template now: failures, backoff and fallback.

The loop reports every create outcome here (:meth:`ProviderHealth.failed`, :meth:`succeeded`);
the scale-out policy asks :meth:`ProviderHealth.blocked` before it picks a provider, so a
provider that just refused goes to the back until its backoff ends, and the next provider by
priority is asked at once. What a failure blocks follows its class
(:mod:`orchestrator.reconcile.classify`):

* capacity and quota: nothing here. The memory of refusals (:mod:`.refusals`) holds the refused
  offering (capacity) or every offering of the provider (quota), shared and durable, and the
  policy passes over what it holds: the provider's other offerings may still have room;
* permanent: this template on this provider until :meth:`clear` (a configuration reload),
  since the same request will be refused the same way;
* transient: nothing is passed over until ``policy.retry.attempts`` consecutive failures; until
  then the same op waits out its backoff (:meth:`retry_at`) and is tried again where it was.

State is in memory: after a restart every provider is asked again, which costs at most one
refused request each. Time is the caller's (the loop's injected clock).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.backoff import Backoff
from orchestrator.model.config import RetrySettings
from orchestrator.reconcile.classify import Classification, FailureClass


@dataclass
class _Record:
    failures: int = 0
    kind: FailureClass = FailureClass.TRANSIENT
    until: float = 0.0  # blocked (passed over) until then; inf = until clear()
    retry_at: float = 0.0  # the same op may be tried again from then
    last: Classification | None = None


@dataclass(frozen=True)
class Block:
    """Why a provider is passed over for a template, and until when."""

    provider: str
    template: str
    kind: FailureClass
    failures: int
    until: float
    text: str

    def evidence(self) -> dict[str, Any]:
        """JSON-ready."""
        until: float | None = None if self.until == float("inf") else round(self.until, 3)
        return {
            "provider": self.provider,
            "template": self.template,
            "class": self.kind.value,
            "failures": self.failures,
            "until": until,
            "text": self.text,
        }


@dataclass
class ProviderHealth:
    """Transient and permanent failures per (provider, template)."""

    settings: RetrySettings
    rng: random.Random = field(default_factory=random.Random)
    _records: dict[tuple[str, str], _Record] = field(default_factory=dict)

    def failed(self, provider: str, template: str, failure: Classification, now: float) -> float:
        """Record a failed create; returns when the same op may be tried again (a capacity or
        quota refusal: now, the op is closed and the memory of refusals holds what was refused)."""
        if failure.kind in (FailureClass.CAPACITY, FailureClass.QUOTA):
            return now
        record = self._records.setdefault((provider, template), _Record())
        record.failures += 1
        record.kind = failure.kind
        record.last = failure
        wait = Backoff.from_settings(self.settings).delay(record.failures, self.rng)
        record.retry_at = now + wait
        if failure.kind == FailureClass.PERMANENT:
            record.until = float("inf")
        elif failure.kind == FailureClass.TRANSIENT and record.failures < self.settings.attempts:
            record.until = 0.0
        else:
            record.until = now + wait
        return record.retry_at

    def succeeded(self, provider: str, template: str) -> None:
        """A create of ``template`` on ``provider`` went through: its failures are forgotten."""
        self._records.pop((provider, template), None)

    def blocked(self, provider: str, template: str, now: float) -> Block | None:
        """Why ``provider`` is passed over for ``template`` now, or None when it may be asked."""
        record = self._records.get((provider, template))
        if record is not None and now < record.until:
            text = record.last.text if record.last is not None else ""
            return Block(provider, template, record.kind, record.failures, record.until, text)
        return None

    def retry_at(self, provider: str, template: str) -> float:
        """When an op of ``template`` on ``provider`` that failed may be tried again (0: now)."""
        record = self._records.get((provider, template))
        return record.retry_at if record is not None else 0.0

    def clear(self) -> None:
        """Forget every failure (the configuration was reloaded)."""
        self._records.clear()

    def blocks(self, now: float) -> list[Block]:
        """Every current block, for status and the audit."""
        out = []
        for (provider, scope), record in sorted(self._records.items()):
            if now < record.until:
                text = record.last.text if record.last is not None else ""
                out.append(Block(provider, scope, record.kind, record.failures, record.until, text))
        return out
