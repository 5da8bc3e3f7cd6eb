"""Whether an open create op that failed is tried again now, later, or given up for a fallback.

The loop asks this for an op whose last attempt failed (classified by :mod:`.classify` and
recorded in :mod:`.health`):

* ``abandon`` when the cloud refused it for capacity or quota, or the memory of refusals
  (:mod:`.refusals`) holds one of its offerings or its provider's quota now: a create is never
  retried on a held offering (``hold``, :func:`.refusedops.op_hold`);
* ``abandon`` when its provider is passed over for the template (permanent, or transient
  ``policy.retry.attempts`` times in a row): the loop records the op's uncreated
  keys gone, the gap then counts them missing again and the scale-out asks the next provider;
* ``abandon`` too when the counted spend is above a budget (lowered by a reload): a retry
  would launch what the budget no longer pays for;
* ``wait`` until its backoff ends; ``retry`` once it has (same op id, same keys: nothing is
  counted twice and the cloud's idempotency token keeps a launched instance single).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.model.config import Config
from orchestrator.reconcile.budget import Usage, over_budget
from orchestrator.reconcile.health import ProviderHealth


@dataclass(frozen=True)
class RetryDecision:
    """What to do with one failed create op, with the numbers why."""

    action: Literal["retry", "wait", "abandon"]
    at: float
    evidence: dict[str, Any] = field(default_factory=dict)


def retry_decision(
    config: Config,
    usage: Usage,
    health: ProviderHealth,
    provider: str,
    template: str,
    now: float,
    hold: Mapping[str, Any] | None = None,
) -> RetryDecision:
    """The decision for a failed create op of ``template`` on ``provider`` at ``now``; ``hold``:
    what the memory of refusals holds of the op (None: nothing)."""
    evidence: dict[str, Any] = {"provider": provider, "template": template, "now": now}
    if hold is not None:
        evidence["refusal"] = dict(hold)
        return RetryDecision("abandon", now, evidence)
    block = health.blocked(provider, template, now)
    if block is not None:
        evidence["block"] = block.evidence()
        return RetryDecision("abandon", now, evidence)
    over = over_budget(config, usage, provider)
    if over is not None:
        evidence["budget"] = over
        return RetryDecision("abandon", now, evidence)
    at = health.retry_at(provider, template)
    evidence["retry_at"] = at
    if now < at:
        return RetryDecision("wait", at, evidence)
    return RetryDecision("retry", now, evidence)
