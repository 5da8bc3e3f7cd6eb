"""Scale-out policy: the gap of each template → create ops, every decision with its evidence.

Per template with a gap, in name order (so two templates share a budget the same way every
pass), the checks are, in order:

1. **known**: a template the controller names but the site did not configure is skipped;
2. **breaker** (:mod:`.breaker`): open → nothing; half-open → one probe (one granule), and
   nothing more until its outcome closes or reopens the breaker;
3. **cooldown**: no scale-up within ``policy.cooldown`` of the template's previous one. A create
   that delivered nothing (every key recorded gone, none created: refused for capacity or
   quota and abandoned) does not count, so its fallback goes out at once;
4. **providers by priority**: a provider passed over by :mod:`.health` (permanent, or
   transient past ``policy.retry.attempts``), held by the memory of refusals (:mod:`.refusals`:
   its quota, or every offering of the template in capacity backoff) or named ``unavailable``
   by the loop (no valid lease, a failed op awaiting its retry) is skipped and the next one asked;
   each takes what fits under its room (:func:`.budget.room`: ``max_instances``, the template's
   ``max_instances``, the provider and cluster budgets), rounded to its ``granularity``: up for
   the gap, down when the room is smaller (the budget is never exceeded to fill a granule);
   what does not fit spills to the next provider.

The result only decides; the loop carries the ops out through the fenced executor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.config import Config
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.breaker import Breakers, Position
from orchestrator.reconcile.budget import Usage, room
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.health import ProviderHealth
from orchestrator.reconcile.ledger import InstanceRecord
from orchestrator.reconcile.policy import by_priority, round_up
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.refusedops import provider_hold


@dataclass(frozen=True)
class ScaleOutDecision:
    """What the policy decided for one template and why.

    ``outcome``: ``ops`` (the whole gap is covered), ``partial`` (some of it: the rest found no
    room), ``no-room``, ``cooldown``, ``breaker-open``, ``breaker-probe`` (the one request of a
    half-open breaker is out, its outcome is awaited), ``unknown-template`` or ``no-gap``.
    """

    template: str
    outcome: str
    ops: tuple[OpRequest, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyInputs:
    """Everything one scale-out decision reads besides the configuration."""

    gaps: Mapping[str, TemplateGap]
    records: Iterable[InstanceRecord]
    health: ProviderHealth
    breakers: Breakers
    now: float
    # Providers the loop cannot ask now (no valid lease, a failed op awaiting its retry) → why;
    # passed over like a failed provider, so the template falls back to the next by priority.
    unavailable: Mapping[str, str] = field(default_factory=dict)
    # Templates whose create was refused earlier in this phase: the rest of that scale-up goes to
    # the next provider now, whatever the refused op did create (it counts as a scale-up).
    fallback: frozenset[str] = frozenset()
    # What the cloud refused, until when (refusals.py): held offerings and quotas are passed over.
    refusals: RefusalMemory | None = None


def scale_out(config: Config, inputs: PolicyInputs) -> list[ScaleOutDecision]:
    """One decision per template in ``inputs.gaps``, by template name."""
    records = list(inputs.records)
    usage = Usage.of(config, records)
    last = last_scale_ups(records)
    return [_decide(config, inputs, usage, last, gap) for _, gap in sorted(inputs.gaps.items())]


def last_scale_ups(records: Iterable[InstanceRecord]) -> dict[str, float]:
    """Template → intent time of its latest create op that delivered or may still deliver hosts
    (an op filling a warm pool is no scale-up: its refill must not hold the next demand back)."""
    ops: dict[str, list[InstanceRecord]] = {}
    for record in records:
        if not record.pool:
            ops.setdefault(record.op_id, []).append(record)
    last: dict[str, float] = {}
    for keys in ops.values():
        refused = all(r.gone and r.created is None for r in keys)
        if not refused:
            first = keys[0]
            last[first.template] = max(last.get(first.template, 0.0), first.intent_committed)
    return last


def _decide(
    config: Config, inputs: PolicyInputs, usage: Usage, last: Mapping[str, float], gap: TemplateGap
) -> ScaleOutDecision:
    evidence: dict[str, Any] = {"gap": gap.evidence(), "now": inputs.now}
    name = gap.template
    if gap.gap <= 0:
        return ScaleOutDecision(name, "no-gap", (), evidence)
    if name not in config.templates:
        return ScaleOutDecision(name, "unknown-template", (), evidence)
    breaker = inputs.breakers.state(name)
    position = breaker.position_at(inputs.now, config.policy.breaker)
    evidence["breaker"] = breaker.evidence(inputs.now, config.policy.breaker)
    if position == Position.OPEN:
        return ScaleOutDecision(name, "breaker-open", (), evidence)
    previous = last.get(name)
    if position == Position.HALF_OPEN:
        reopened = breaker.reopens_at(config.policy.breaker) or 0.0
        if previous is not None and previous >= reopened:
            # The probe went out after the cool-off; its bootstrap or join decides the breaker.
            evidence["probe_sent"] = previous
            return ScaleOutDecision(name, "breaker-probe", (), evidence)
    cooldown = config.policy.cooldown
    if previous is not None and inputs.now < previous + cooldown and name not in inputs.fallback:
        evidence["cooldown"] = {"last_scale_up": previous, "cooldown": cooldown, "until": previous + cooldown}
        return ScaleOutDecision(name, "cooldown", (), evidence)
    wanted = gap.gap
    if position == Position.HALF_OPEN:
        wanted = 1  # one probe after the cool-off; rounded up to the provider's granule below
        evidence["probe"] = True
    ops, tried = _fill(config, inputs, usage, name, wanted)
    evidence["providers"] = tried
    covered = sum(op.count for op in ops)
    outcome = "ops" if covered >= wanted else ("partial" if ops else "no-room")
    return ScaleOutDecision(name, outcome, tuple(ops), evidence)


def _fill(
    config: Config, inputs: PolicyInputs, usage: Usage, template: str, wanted: int
) -> tuple[list[OpRequest], list[dict[str, Any]]]:
    ops: list[OpRequest] = []
    tried: list[dict[str, Any]] = []
    remaining = wanted
    for provider in by_priority(config, template):
        if remaining <= 0:
            break
        why = inputs.unavailable.get(provider)
        if why is not None:
            tried.append({"provider": provider, "skipped": "unavailable", "reason": why})
            continue
        block = inputs.health.blocked(provider, template, inputs.now)
        if block is not None:
            tried.append({"provider": provider, "skipped": "failed", "block": block.evidence()})
            continue
        held = provider_hold(inputs.refusals, config, provider, template, inputs.now)
        if held is not None:  # its quota, or every offering in capacity backoff
            tried.append({"provider": provider, **held})
            continue
        granule = config.providers[provider].granularity
        fits = room(config, usage, provider, template)
        count = min(round_up(remaining, granule), fits.fits // granule * granule)
        entry = {"provider": provider, "room": fits.evidence, "granularity": granule, "count": count}
        tried.append(entry)
        if count <= 0:
            entry["skipped"] = fits.limit
            continue
        ops.append(OpRequest(template=template, provider=provider, count=count, asked=remaining))
        usage.add(config, provider, template, count)
        remaining -= count
    return ops, tried
