"""What a create op's outcome tells the memory of refusals (:mod:`.refusals`), and what the
memory holds of a failed op (the policy reads the memory itself: :mod:`.offers`).

An op's keys are placed on offerings by its ``requestIntent``'s detail (``placements_of``, in
key order; none named: every key on the provider's default offering), and an offering is held
by its *placement* (``offering_name(flavor, zone, subnet)``, BRIEF decision 1). A refused create
names the keys the cloud refused and each one's class (``CloudRefusal.refused``); when the run
named none, every key of the op still without an outcome counts as refused with the op's class.
A capacity refusal holds the key's placement, a quota refusal the provider; transient and
permanent failures are :mod:`.health`'s. A create that went through frees the placements of the
keys it made.

A quota record also goes when one of the provider's instances that the cloud made is returned
or lost after the refusal (:func:`quota_freed`): read from the facts the pass read anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orchestrator.model.config import Config
from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.modules import Classification
from orchestrator.model.offerings import offering_at, placements_of
from orchestrator.ops.openops import OpenOp
from orchestrator.reconcile.offers import configured, placement_key
from orchestrator.reconcile.refusals import CAPACITY, QUOTA, Refusal, RefusalMemory

log = logging.getLogger(__name__)


def key_placements(
    config: Config, provider: str, template: str, op_id: str, detail: str, keys: Iterable[str]
) -> dict[str, str]:
    """Instance key → placement, for ``keys`` of op ``op_id`` (an offering of the catalogue,
    not listed in the configuration, is held by its name: the name of a selected flavor is its
    placement). A key whose offering is unknown (no detail, nothing listed) is left out."""
    offerings = configured(config, template, provider)
    by_name = {o.name: placement_key(o) for o in offerings}
    default = offerings[0].name if offerings else ""
    placements = placements_of(detail)
    out: dict[str, str] = {}
    for key in keys:
        index = key_index(op_id, key)
        name = offering_at(placements, index, default) if index is not None else default
        if name:
            out[key] = by_name.get(name, name)
    return out


def key_index(op_id: str, key: str) -> int | None:
    """The index of ``key`` in op ``op_id`` (None: not one of its keys)."""
    suffix = key.removeprefix(f"{op_id}-")
    if suffix == key or not suffix.isdigit() or not suffix.isascii():
        return None
    index = int(suffix)
    return index if instance_key(op_id, index) == key else None


def refused_placements(keys: Mapping[str, str], refused: Mapping[str, str], failure: str) -> list[tuple[str, str]]:
    """``(placement, class)`` of every refused key (``refused``: key → class as the run named
    them; empty: every key of ``keys`` with ``failure``), capacity and quota only, once each."""
    named = [(keys[k], str(c)) for k, c in sorted(refused.items()) if k in keys] if refused else []
    pairs = named or [(p, failure) for _, p in sorted(keys.items())]
    out: list[tuple[str, str]] = []
    for placement, kind in pairs:
        if kind in (CAPACITY, QUOTA) and (placement, kind) not in out:
            out.append((placement, kind))
    return out


def intent_detail(facts: Iterable[Fact], op_id: str) -> str:
    """The detail of op ``op_id``'s ``requestIntent`` ("" when there is none)."""
    return next((f.detail for f in facts if f.op_id == op_id and f.kind == FactKind.REQUEST_INTENT), "")


def record_refusal(
    memory: RefusalMemory,
    config: Config,
    provider: str,
    op: OpenOp | None,
    exc: BaseException,
    failure: Classification,
    now: float,
) -> list[Refusal]:
    """Hold what a failed create on ``provider`` was refused (``op``: the open op with its keys
    still without an outcome; None when it failed before its intent: then a quota refusal still
    holds the provider, a capacity refusal names no offering). The records written."""
    if failure.kind.value not in (CAPACITY, QUOTA) and not getattr(exc, "refused", None):
        return []
    try:
        return _record_refusal(memory, config, provider, op, exc, failure, now)
    except Exception as exc_write:  # the op is still closed: the next refusal is recorded again
        log.warning("refusal on %s not remembered: %s", provider, _line(exc_write))
        return []


def _record_refusal(
    memory: RefusalMemory,
    config: Config,
    provider: str,
    op: OpenOp | None,
    exc: BaseException,
    failure: Classification,
    now: float,
) -> list[Refusal]:
    keys = key_placements(config, provider, op.template, op.op_id, op.detail, op.pending) if op is not None else {}
    refused: Mapping[str, str] = getattr(exc, "refused", None) or {}
    out: list[Refusal] = []
    quota_done = False
    for placement, kind in refused_placements(keys, refused, failure.kind.value):
        if kind == QUOTA:
            if not quota_done:
                out.append(memory.refused(provider, "", QUOTA, failure.text, now))
            quota_done = True
        else:
            out.append(memory.refused(provider, placement, CAPACITY, failure.text, now))
    if not keys and failure.kind.value == QUOTA:  # no offering known: the quota is the account's still
        out.append(memory.refused(provider, "", QUOTA, failure.text, now))
    return out


def record_success(
    memory: RefusalMemory,
    config: Config,
    provider: str,
    template: str,
    op_id: str,
    detail: Callable[[], str],
    keys: Callable[[], Iterable[str]],
) -> None:
    """The create made ``keys()``: their placements have room (``detail()``: the op's intent
    detail; both asked only when the memory holds an offering of the provider)."""
    if not memory.holds_capacity(provider):
        return
    try:
        made = key_placements(config, provider, template, op_id, detail(), keys())
        for placement in sorted(set(made.values())):
            memory.succeeded(provider, placement)
    except Exception as exc:  # the create went through all the same: its offering is probed again later
        log.warning("success on %s not remembered: %s", provider, _line(exc))


def created_keys(facts: Iterable[Fact], keys: Iterable[str]) -> list[str]:
    """Those of ``keys`` the facts record created (``instanceCreated``)."""
    made = {f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED}
    return [k for k in keys if k in made]


def _line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def refresh_memory(memory: RefusalMemory, facts: Mapping[str, Sequence[Fact]], now: float) -> None:
    """At the pass's read: the memory as the document holds it now, expired records removed,
    and the quota records cleared that a gone instance freed (:func:`quota_freed`)."""
    memory.refresh()
    memory.prune(now)
    quota_freed(memory, facts)


def quota_freed(memory: RefusalMemory, facts: Mapping[str, Sequence[Fact]]) -> list[str]:
    """Clear the quota record of every provider one of whose instances (made by the cloud:
    ``instanceCreated``) was returned or lost after the record's last refusal; the providers."""
    freed: list[str] = []
    for provider, provider_facts in sorted(facts.items()):
        record = memory.quota_record(provider)
        if record is None:
            continue
        made = {f.instance_key for f in provider_facts if f.kind == FactKind.INSTANCE_CREATED and f.instance_key}
        if any(f.kind in GONE_KINDS and f.instance_key in made and f.committed > record.last for f in provider_facts):
            memory.quota_may_have_changed(provider)
            freed.append(provider)
    return freed


def op_hold(
    memory: RefusalMemory, config: Config, provider: str, op: OpenOp | None, failure: str, now: float
) -> dict[str, Any] | None:
    """What the memory holds of a failed create op now (its class ``failure`` capacity or quota:
    what was just recorded; else its provider's quota, or the placement of one of its keys still
    without an outcome), or None: it may be retried."""
    quota = memory.quota(provider, now)
    if failure == QUOTA or quota is not None:
        return {"scope": QUOTA, "provider": provider, "placement": "", "until": quota}
    keys = key_placements(config, provider, op.template, op.op_id, op.detail, op.pending) if op is not None else {}
    for placement in sorted(set(keys.values())):
        until = memory.capacity(provider, placement, now)
        if until is not None:
            return {"scope": CAPACITY, "provider": provider, "placement": placement, "until": until}
    if failure == CAPACITY:
        return {"scope": CAPACITY, "provider": provider, "placement": "", "until": None}
    return None
