"""Scale-out policy: the gap of each template → create ops, every decision with its evidence.

Per template with a gap, in name order (so two templates share a budget the same way every
pass), the checks are, in order:

1. **known**: a template the controller names but the site did not configure is skipped;
2. **breaker** (:mod:`.breaker`): open → nothing; half-open → one probe (one granule), and
   nothing more until its outcome closes or reopens the breaker;
3. **cooldown**: no scale-up within ``policy.cooldown`` of the template's previous one. A create
   that delivered nothing (every key recorded gone, none created: refused for capacity or
   quota and abandoned) does not count, so its fallback goes out at once;
4. **providers by priority**: a provider is passed over (and the next one asked) when the loop
   cannot ask it now (``no-lease``, ``open-op``: a failed op awaiting its retry), when the
   template has no offering on it (``no-offering``: a ``select:`` not resolved), when it is
   held for ``quota`` (the memory of refusals, or :mod:`.health`), when :mod:`.health` passes it
   over (``failed``: permanent, or transient past ``policy.retry.attempts``; ``backoff``: a
   capacity refusal in an earlier pass), or when every offering of it is in capacity
   ``backoff``;
5. **offerings** (:mod:`.offers`): a provider's offerings are asked in
   :func:`~orchestrator.model.offerings.by_cost` order (lowest cost per slot, then the
   configured order), skipping those held by the memory of refusals (``holds``) or refused
   earlier in this phase (``refused_now``). The capacity of an offering is unknown until it is
   refused, so the first one not held takes all the provider's room; the next takes what it
   leaves only when its room differs (a budget at another price). The loop moves the rest of a
   refused op to the next offering at once (:mod:`.scaleoutphase`);
6. **room**: each provider takes what fits under its room (:func:`.budget.room` at the price of
   the offering it goes to: ``max_instances``, the template's ``max_instances``, the provider,
   cluster and host group budgets, per hour and per month), rounded to its ``granularity``: up
   for the gap, down when the room is smaller (the budget is never exceeded to fill a granule);
   what does not fit spills to the next provider.

The evidence of every provider asked (``evidence["providers"]``, docs/design-reconcile.md):
``{"provider", "count", "skipped", "until", "offerings": [{"offering", "flavor", "zone",
"subnet", "cost_per_hour", "slots", "cost_per_slot", "count", "skipped", "until"}], ...}``,
``skipped`` None when it was asked. The result only decides; the loop carries the ops out
through the fenced executor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.config import Config
from orchestrator.model.costs import MonthSpend
from orchestrator.model.offerings import MAX_PLACEMENTS, Offering, Placement
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.breaker import Breakers, Position
from orchestrator.reconcile.budget import Room, Usage, room
from orchestrator.reconcile.classify import FailureClass
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.health import Block, ProviderHealth
from orchestrator.reconcile.ledger import InstanceRecord
from orchestrator.reconcile.offers import NoHolds, OfferingHolds, Selected, offerings_for, placement_key
from orchestrator.reconcile.policy import by_priority, round_up

# Why the loop cannot ask a provider (``PolicyInputs.unavailable``) when it holds no valid lease;
# any other reason is a failed op awaiting its retry.
NO_LEASE = "no valid lease"
# A health block's class → the provider's ``skipped`` (transient and permanent: ``failed``).
_BLOCKED = {FailureClass.QUOTA: "quota", FailureClass.CAPACITY: "backoff"}


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
    # the next offering or provider now, whatever the refused op did create (a scale-up).
    fallback: frozenset[str] = frozenset()
    # (provider, placement key) refused for capacity earlier in this phase: skipped like an
    # offering in backoff, so the rest goes to the next offering of the same provider at once.
    refused_now: frozenset[tuple[str, str]] = frozenset()
    # What the memory of refusals holds back (capacity per offering, quota per provider).
    holds: OfferingHolds = field(default_factory=NoHolds)
    # The offerings ``select:`` templates resolved from their providers' catalogues.
    selected: Selected = field(default_factory=dict)
    # What each host group spent this calendar month (the budgets per month; None: none set).
    month: MonthSpend | None = None


def scale_out(config: Config, inputs: PolicyInputs) -> list[ScaleOutDecision]:
    """One decision per template in ``inputs.gaps``, by template name."""
    records = list(inputs.records)
    usage = Usage.of(config, records, inputs.selected, inputs.month)
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
        entry, op = _on_provider(config, inputs, usage, template, provider, remaining)
        tried.append(entry)
        if op is not None:
            ops.append(op)
            remaining -= op.count
    return ops, tried


def _on_provider(
    config: Config, inputs: PolicyInputs, usage: Usage, template: str, provider: str, remaining: int
) -> tuple[dict[str, Any], OpRequest | None]:
    """The op of ``template`` on ``provider`` (None: passed over) and the provider's evidence."""
    offerings = offerings_for(config, template, provider, inputs.selected)
    shown = [{**o.evidence(), "count": 0, "skipped": None, "until": None} for o in offerings]
    entry: dict[str, Any] = {"provider": provider, "count": 0, "skipped": None, "until": None, "offerings": shown}

    def passed_over(why: str, until: float | None = None, **more: Any) -> tuple[dict[str, Any], None]:
        entry.update(skipped=why, until=until, **more)
        return entry, None

    why = inputs.unavailable.get(provider)
    if why is not None:
        return passed_over("no-lease" if why == NO_LEASE else "open-op", reason=why)
    if not offerings:
        return passed_over("no-offering")
    quota = inputs.holds.quota(provider, inputs.now)
    if quota is not None:
        return passed_over("quota", quota)
    block = inputs.health.blocked(provider, template, inputs.now)
    refused = {placement for p, placement in inputs.refused_now if p == provider}
    # A capacity refusal in this phase holds the offering refused, not the provider: its other
    # offerings are asked at once. One of an earlier pass holds the provider until its backoff
    # ends (health does not say which offering it was; the memory of refusals does).
    if block is not None and not (block.kind == FailureClass.CAPACITY and refused):
        if block.kind == FailureClass.CAPACITY:  # which offering refused is not known here: all held
            for evidence in shown:
                evidence.update(skipped="backoff", until=_until(block.until))
        return passed_over(_BLOCKED.get(block.kind, "failed"), _until(block.until), block=block.evidence())
    free: list[tuple[Offering, dict[str, Any]]] = []
    untils: list[float] = []
    for offering, evidence in zip(offerings, shown, strict=True):
        until = _held(inputs, provider, placement_key(offering), refused, block)
        if until is None:
            free.append((offering, evidence))
        else:
            evidence.update(skipped="backoff", until=until or None)
            untils += [until] if until else []
    if not free:
        return passed_over("backoff", min(untils, default=None))  # the first one back
    return _place(config, usage, template, provider, remaining, free, entry)


def _held(inputs: PolicyInputs, provider: str, key: str, refused: set[str], block: Block | None) -> float | None:
    """Until when the offering placed as ``key`` is held (0.0: refused in this phase, no time
    known); None when it may be asked."""
    until = inputs.holds.capacity(provider, key, inputs.now)
    if key not in refused:
        return until
    refused_until = _until(block.until) if block is not None else None
    return max(until or 0.0, refused_until or 0.0)


def _place(
    config: Config,
    usage: Usage,
    template: str,
    provider: str,
    remaining: int,
    free: list[tuple[Offering, dict[str, Any]]],
    entry: dict[str, Any],
) -> tuple[dict[str, Any], OpRequest | None]:
    """``remaining`` (rounded to the provider's granule) on the offerings ``free``, in order, each
    under the room at its own price; the op, or None when nothing fits."""
    granule = config.providers[provider].granularity
    want = round_up(remaining, granule)
    trial = usage.copy()
    rooms: list[Room] = []
    taken: list[tuple[Offering, int, dict[str, Any]]] = []
    total = 0
    for offering, evidence in free:
        if total >= want or len(taken) == MAX_PLACEMENTS:  # an intent names at most that many
            break
        fits = room(config, trial, provider, template, offering=offering)
        rooms.append(fits)
        take = min(want - total, fits.fits)
        if take > 0:
            taken.append((offering, take, evidence))
            trial.add(config, provider, template, take, cost=offering.cost_per_hour)
            total += take
    count = total // granule * granule  # never above the room to fill a granule
    entry.update(room=rooms[0].evidence, granularity=granule)
    if count <= 0:
        entry["skipped"] = rooms[0].limit or "granularity"
        return entry, None
    placements: list[Placement] = []
    left = count
    for offering, take, evidence in taken:
        n = min(take, left)
        if n <= 0:
            break
        placements.append(Placement(offering.name, n))
        evidence["count"] = n
        usage.add(config, provider, template, n, cost=offering.cost_per_hour)
        left -= n
    entry["count"] = count
    return entry, OpRequest(template, provider, count, remaining, tuple(placements))


def _until(at: float) -> float | None:
    """A time as evidence: None for "until the configuration is reloaded" (infinite)."""
    return None if at == float("inf") else round(at, 3)
