"""The warm pool's decisions: take from it first, refill it after, return its surplus. No I/O.

Per template and provider, ``warm_pool`` instances are kept stopped (docs/daemon.md, "The warm
pool"). In the scale-out phase, in this order:

1. **take** (:func:`takes`): each template's gap is first served from its pools, providers by
   priority, oldest pool instance first, in start ops of at most 50 keys. A provider the loop
   cannot ask (no lease, a failed op awaiting its retry) or that :mod:`.health` passes over is
   skipped; an open breaker takes
   nothing, a half-open one one instance; a start must fit the budgets (it adds the running
   price less the stopped price; ``max_instances`` counted the instance already). Only pool
   instances the cloud made (``instanceCreated``) are taken. No cooldown: a start is not a
   scale-up of new instances.
2. the creates of the rest of the gap (:mod:`.scaleout`, unchanged);
3. **refill** (:func:`refills`): after those creates, and only for templates whose demand is
   served (no gap left): each pool below its target gets one create op of the difference, under
   ``max_instances`` and the budgets at the stopped price (no granularity: a pool is an exact
   count), on the provider's default offering (none is asked while the memory of refusals holds
   that offering for capacity, or the provider for quota). A fill is no scale-up either (no
   cooldown starts from it).
4. **surplus** (:func:`surplus`): a pool above its target (``warm_pool`` lowered, a template or
   provider removed) returns the difference, oldest first, through an ordinary return op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.config import Config
from orchestrator.model.ops import OpRequest
from orchestrator.model.pool import MAX_START_KEYS
from orchestrator.reconcile.breaker import Position
from orchestrator.reconcile.budget import Usage, room, start_room
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.ledger import InstanceRecord
from orchestrator.reconcile.offers import default_for, placement_key
from orchestrator.reconcile.policy import by_priority
from orchestrator.reconcile.scaleout import PolicyInputs


@dataclass(frozen=True)
class PoolTake:
    """Start ``keys`` (warm-pool instances of ``template`` on ``provider``) for demand."""

    provider: str
    template: str
    keys: tuple[str, ...]
    evidence: Mapping[str, Any] = field(default_factory=dict)


def target(config: Config, provider: str, template: str) -> int:
    """The configured ``warm_pool`` of ``template`` on ``provider`` (0 when not configured)."""
    on = config.templates.get(template)
    side = on.providers.get(provider) if on is not None and provider in config.providers else None
    return side.warm_pool if side is not None else 0


def members(records: Iterable[InstanceRecord], provider: str, template: str) -> list[InstanceRecord]:
    """The pool of ``template`` on ``provider``: waiting instances (and those on their way), oldest first."""
    found = [r for r in records if r.in_pool and r.provider == provider and r.template == template]
    return sorted(found, key=lambda r: (r.intent_committed, r.key))


def pools(config: Config, records: Iterable[InstanceRecord]) -> dict[tuple[str, str], list[InstanceRecord]]:
    """Every pool with a target or a member: (provider, template) → its members, oldest first."""
    records = list(records)
    keys = {(r.provider, r.template) for r in records if r.in_pool}
    for tname, template in config.templates.items():
        keys.update((p, tname) for p, side in template.providers.items() if side.warm_pool > 0)
    return {key: members(records, *key) for key in sorted(keys)}


def takes(config: Config, inputs: PolicyInputs) -> list[PoolTake]:
    """What to start from the pools for the gaps of ``inputs`` (see the module docstring)."""
    records = list(inputs.records)
    usage = Usage.of(config, records, month=inputs.month)
    out: list[PoolTake] = []
    for name, gap in sorted(inputs.gaps.items()):
        if gap.gap <= 0 or name not in config.templates:
            continue
        position = inputs.breakers.state(name).position_at(inputs.now, config.policy.breaker)
        if position == Position.OPEN:
            continue
        wanted = 1 if position == Position.HALF_OPEN else gap.gap
        for provider in by_priority(config, name):
            if wanted <= 0:
                break
            if provider in inputs.unavailable or inputs.health.blocked(provider, name, inputs.now) is not None:
                continue
            ready = [r.key for r in members(records, provider, name) if r.created is not None]
            fits = start_room(config, usage, provider, name)
            count = min(wanted, len(ready), fits.fits)
            if count <= 0:
                continue
            evidence = {"gap": gap.evidence(), "pool": len(ready), "room": fits.evidence, "count": count}
            # One start op names at most MAX_START_KEYS keys (its intent's detail is bounded).
            for at in range(0, count, MAX_START_KEYS):
                out.append(PoolTake(provider, name, tuple(ready[at : min(count, at + MAX_START_KEYS)]), evidence))
            usage.start(config, provider, name, count)
            wanted -= count
    return out


def refills(config: Config, inputs: PolicyInputs, unserved: Mapping[str, TemplateGap]) -> list[OpRequest]:
    """One fill op per pool below its target, for templates with no gap left in ``unserved``."""
    records = list(inputs.records)
    usage = Usage.of(config, records, month=inputs.month)
    out: list[OpRequest] = []
    for (provider, name), pool in pools(config, records).items():
        want = target(config, provider, name)
        missing = want - len(pool)
        if missing <= 0 or (name in unserved and unserved[name].gap > 0):
            continue
        if provider in inputs.unavailable or inputs.health.blocked(provider, name, inputs.now) is not None:
            continue
        if _held(config, inputs, provider, name):
            continue
        if inputs.breakers.state(name).position_at(inputs.now, config.policy.breaker) == Position.OPEN:
            continue
        count = min(missing, room(config, usage, provider, name, stopped=True).fits)
        if count > 0:
            out.append(OpRequest(template=name, provider=provider, count=count, asked=missing))
            usage.add(config, provider, name, count, stopped=True)
    return out


def _held(config: Config, inputs: PolicyInputs, provider: str, template: str) -> bool:
    """Whether a fill (on the default offering) would be asked of what the memory of refusals
    holds: the provider for quota, or the default offering in capacity backoff."""
    if inputs.holds.quota(provider, inputs.now) is not None:
        return True
    default = default_for(config, template, provider, inputs.selected)
    return default is None or inputs.holds.capacity(provider, placement_key(default), inputs.now) is not None


def surplus(config: Config, records: Iterable[InstanceRecord], leased: Iterable[str]) -> dict[str, list[str]]:
    """Provider → pool instances above their pool's target, oldest first (only those the cloud
    made: a fill still in flight is finished by its resume first)."""
    mine = set(leased)
    out: dict[str, list[str]] = {}
    for (provider, name), pool in pools(config, records).items():
        extra = len(pool) - target(config, provider, name)
        if provider not in mine or extra <= 0:
            continue
        made = [r.key for r in pool if r.created is not None]
        if made[:extra]:
            out.setdefault(provider, []).extend(made[:extra])
    return out
