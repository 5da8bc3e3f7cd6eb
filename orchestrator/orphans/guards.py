"""The guards every automatic orphan action passes, in this order (docs/orphans-json.md, "Guards").

Each has a name (:class:`Blocked`): the automatic action gives the first that refuses as its
reason, an administrator's confirmation names every one (``xceprov orphans return ID``).

1. ``act``: the scan was asked to act (``xceprov orphans`` only reports; the daemon acts);
2. ``dry_run`` (policy.orphans.dry_run): the finding says what would be done, nothing is done;
3. ``tags``: the object's tags carry this cluster's ``xce:cluster`` and this provider's
   ``xce:provider`` (an instance with no listing entry is judged by the Terraform state of
   this cluster's own working directory, which holds only what this cluster made);
4. ``protect``: the protect tag ``xce:protect`` (any value but ``false``) exempts the object;
5. ``lease``: the provider's lease is valid (its epoch is stamped on every fact the action commits, and
   the executor commits the ``returning`` intent before any terminate);
6. ``views``: both views read completely this pass: every shard's refresh-only plan and shard 0's
   listing, and the controller's status, hosts and facts;
7. ``settle_window``: the controller is primary (it answered ``queryStatus``: a standby answers nothing but a
   redirect) and the settle window after a failover has passed (below);
8. ``orphan_grace``: a terminate (class (b), opted in) only: the cloud's own launch time is older than ``orphan_grace``;
9. ``breaker``: the breaker of the provider is closed;
10. ``rate_limit``: the rate limit leaves room.

An administrator's explicit confirmation (``--confirm``) waives the time guards
(:data:`TIME_GUARDS`), never the ownership ones (:data:`OWNERSHIP_GUARDS`) nor the others.

The settle window: no automatic action until ``settle_window`` after the controller's term
started (a restart or failover starts a new term) **and** every worker of the provider that had
joined has rejoined or been declared lost (none is ``disconnected``). The fixed time alone
could end while a slow network still keeps joined workers from reconnecting; the rejoin alone
could end at once on a controller that lost its record of joins. Both together never return a
live worker that just has not reconnected yet. A controller that does not say when its term
started cannot be judged: nothing automatic happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from orchestrator.clients.controller.types import HostInfo
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.orphans.classes import CLASS_B, TERMINATE, Finding
from orchestrator.orphans.inputs import ControllerRead, ProviderRead
from orchestrator.orphans.limits import Breaker, RateLimit


@dataclass(frozen=True)
class Settle:
    """Whether the settle window after the controller's last term change has passed."""

    passed: bool
    reason: str
    term: int = 0
    term_started: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The report's ``settle`` object."""
        return {"passed": self.passed, "reason": self.reason, "term": self.term, "term_started": self.term_started}


def settle(config: Config, controller: ControllerRead, provider: str, now: float) -> Settle:
    """The settle window of ``provider`` (see the module docstring)."""
    status = controller.status
    if status is None:
        return Settle(False, f"controller view unread: {controller.error or 'no status'}")
    term, started = status.term, status.term_started
    if started <= 0:
        return Settle(False, "the controller does not report when its term started", term, started)
    window = float(config.policy.orphans.settle_window)
    if now - started < window:
        left = window - (now - started)
        return Settle(
            False,
            f"term {term} started {now - started:.0f}s ago, settle window {window:.0f}s ({left:.0f}s left)",
            term,
            started,
        )
    waiting = sorted(h.host_name or h.instance_id for h in controller.hosts if _waited_for(h, provider))
    if waiting:
        shown = ", ".join(waiting[:5]) + (" ..." if len(waiting) > 5 else "")
        return Settle(False, f"{len(waiting)} joined workers not yet rejoined or lost: {shown}", term, started)
    return Settle(
        True, f"term {term} started {now - started:.0f}s ago; every joined worker rejoined or lost", term, started
    )


def _waited_for(host: HostInfo, provider: str) -> bool:
    return host.provider == provider and host.state == "disconnected"


def protected(tags: dict[str, str]) -> bool:
    """The ``xce:protect`` tag is present with any value but ``false``."""
    return owner.PROTECT in tags and tags[owner.PROTECT].strip().lower() != "false"


def launched_at(value: str) -> float | None:
    """Unix seconds of an RFC 3339 launch time, None when missing or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class GuardState:
    """What the guards of one provider read once per scan."""

    config: Config
    provider: str
    now: float
    act: bool
    dry_run: bool
    lease_valid: bool
    controller: ControllerRead
    cloud: ProviderRead
    settle: Settle
    breaker: Breaker
    rate: RateLimit

    def views_complete(self) -> str:
        """Why the views are not complete ("" when they are)."""
        if not self.controller.complete:
            return f"controller view unread: {self.controller.error or 'no status'}"
        if not self.cloud.drift_read or not self.cloud.listing_read:
            return "cloud view unread: " + ("; ".join(self.cloud.errors()) or "not read")
        return ""

    def grace(self) -> float:
        """The provider's ``orphan_grace`` (policy.orphans.grace unless the provider overrides it)."""
        own = self.config.providers[self.provider].orphan_grace
        return float(own if own is not None else self.config.policy.orphans.grace)


# The guards an administrator's explicit confirmation (``--confirm``) may waive: the time guards.
TIME_GUARDS: Final = ("settle_window", "orphan_grace")
# Never waived: whether the object is this cluster's and provider's, and whether it is protected.
OWNERSHIP_GUARDS: Final = ("tags", "protect")


@dataclass(frozen=True)
class Blocked:
    """One guard that refuses a finding's action: its name (as in docs/orphans-json.md) and why."""

    guard: str
    reason: str

    def to_json(self) -> dict[str, str]:
        """The audit entry's form."""
        return {"guard": self.guard, "reason": self.reason}


def refusal(finding: Finding, state: GuardState) -> str:
    """Why ``finding``'s automatic action may not be taken now ("" when every guard passes): the first guard."""
    blocked = blocking(finding, state)
    return blocked[0].reason if blocked else ""


def blocking(finding: Finding, s: GuardState) -> list[Blocked]:
    """Every guard that refuses ``finding``'s action, in the documented order.

    Each guard only reads what the scan already holds, so all are judged: an administrator's
    confirmation names every one that blocks it in one message, not the first alone.
    """
    checks = [
        Blocked(
            "act",
            "" if s.act else "report only: this scan does not act (the daemon acts; or xceprov orphans adopt|return)",
        ),
        Blocked("dry_run", "dry run (policy.orphans.dry_run): nothing is changed" if s.dry_run else ""),
        Blocked("tags", _ownership(finding, s)),
        Blocked("protect", f"protected by the {owner.PROTECT} tag" if protected(finding.tags) else ""),
        Blocked("lease", "" if s.lease_valid else f"no valid lease on provider {s.provider}"),
        Blocked("views", s.views_complete()),
        Blocked("settle_window", "" if s.settle.passed else f"settle window: {s.settle.reason}"),
        Blocked("orphan_grace", _grace(finding, s) if finding.action == TERMINATE else ""),
        Blocked(
            "breaker",
            f"circuit breaker open: {s.breaker.flagged} of {s.breaker.instances} instances look orphaned "
            f"(more than {s.breaker.share:g}): a view is wrong, not the instances"
            if s.breaker.open
            else "",
        ),
        Blocked(
            "rate_limit",
            ""
            if s.rate.remaining(s.provider) > 0
            else f"rate limit: {s.rate.limit} actions within {s.rate.interval:.0f}s reached (max_cleanup_per_interval)",
        ),
    ]
    return [b for b in checks if b.reason]


def lease_held_elsewhere(controller: ControllerRead, provider: str) -> str:
    """Why a confirmation would be refused its lease right now ("" when nobody else holds it).

    A dry run takes no lease; it asks the controller's status who holds the provider's lease.
    """
    status = controller.status
    for lease in status.leases if status is not None else ():
        if lease.provider == provider and lease.holder and lease.expires_in > 0:
            return (
                f"the lease of provider {provider} is held by {lease.holder} ({lease.expires_in:.0f}s left): "
                "the confirmation would be refused (exit 9); stop the daemon first"
            )
    return ""


def _ownership(finding: Finding, s: GuardState) -> str:
    if not finding.tags:
        return "" if finding.cls != CLASS_B else "no owner tags"
    cluster, provider = finding.tags.get(owner.CLUSTER), finding.tags.get(owner.PROVIDER)
    if cluster != s.config.cluster or provider != s.provider:
        return f"tags say cluster {cluster!r}, provider {provider!r}: not this cluster's and provider's"
    return ""


def _grace(finding: Finding, s: GuardState) -> str:
    launched = launched_at(finding.launch_time)
    if launched is None:
        return f"launch time {finding.launch_time!r} unknown: the grace cannot be measured"
    age, grace = s.now - launched, s.grace()
    return "" if age >= grace else f"launched {age:.0f}s ago, within orphan_grace {grace:.0f}s"
