"""Why a pass launched what it did, or nothing: reason codes made from the scale-out decisions.

Pure functions over :class:`~orchestrator.reconcile.scaleout.ScaleOutDecision` (its ``outcome``
and ``evidence``); the status file, ``xceprov explain``, the metric
``xceprov_scale_out_reasons_total`` and the controller (``reportReasons``) all show what
:func:`pass_reasons` gives. docs/daemon.md ("Why nothing launched") lists the codes.

The mapping, decision → reasons (one reason per provider the policy asked, in priority order):

===============================================  =================  ==========================
decision outcome / provider entry ``skipped``    code               ``until``
===============================================  =================  ==========================
``breaker-open``                                 ``breaker-open``   the breaker's ``reopens_at``
``breaker-probe`` (the half-open probe is out)   ``breaker-open``   none (its outcome decides)
``cooldown``                                     ``cooldown``       ``cooldown.until``
entry with ``count`` > 0                         ``launched``       none (``count`` N; one per
                                                                    offering when it names them)
``unavailable`` "no valid lease" / ``no-lease``  ``no-lease``       none
``unavailable`` "op … awaits its retry at T" /   ``open-op``        T when named
``open-op``
``failed`` (health block of class quota) /       ``quota``          the block's / entry's
``quota``                                                           ``until``
``failed`` (capacity, transient, permanent) /    ``backoff``        the block's ``until``; one
``backoff`` (every offering in backoff)                             per offering in backoff
``max_instances`` / ``template max_instances``   ``max-instances``  none
``provider budget`` / ``cluster budget``         ``budget``         none
``granularity``, or room > 0 below one granule   ``granularity``    none
``no-offering``                                  ``no-offering``    none
===============================================  =================  ==========================

A ``partial`` or ``no-room`` decision whose providers all launched names why the rest found no
room: the last launching provider's binding limit (``granularity`` when what is left is below
one granule). A held decision that asked no provider at all reads ``no-offering``.
``no-gap`` and ``unknown-template`` decisions give no reason (nothing is wanted, or the site does
not configure the template). A pass may decide a template more than once (a refused create
falls back in the next round): its reasons are the last decision's, with the ``launched`` of
earlier rounds on providers the last one does not name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.reconcile.scaleout import ScaleOutDecision

# Every reason code, in the order docs/daemon.md lists them.
CODES: Final = (
    "launched",
    "budget",
    "cooldown",
    "max-instances",
    "granularity",
    "backoff",
    "quota",
    "no-lease",
    "breaker-open",
    "open-op",
    "no-offering",
)
LAUNCHED: Final = "launched"

# Provider entry ``skipped`` (and room limits) → code, for those that map one to one.
_SKIPPED: Final[Mapping[str, str]] = {
    "quota": "quota",
    "backoff": "backoff",
    "max_instances": "max-instances",
    "template max_instances": "max-instances",
    "provider budget": "budget",
    "cluster budget": "budget",
    "group budget": "budget",
    "group month budget": "budget",
    "granularity": "granularity",
    "no-offering": "no-offering",
}
_RETRY_AT = re.compile(r"awaits its retry at (\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Reason:
    """One reason of one template's scale-out: what was launched, or what held it back."""

    template: str
    code: str
    provider: str = ""
    offering: str = ""
    count: int = 0  # launched: how many; held: 0
    until: float | None = None  # unix seconds the hold ends, when known
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (status.json, ``explain --json``, the journal)."""
        return {
            "template": self.template,
            "code": self.code,
            "provider": self.provider,
            "offering": self.offering,
            "count": self.count,
            "until": self.until,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Reason:
        """A reason as :meth:`to_json` wrote it (a status file or journal line)."""
        until = doc.get("until")
        return cls(
            template=str(doc.get("template", "")),
            code=str(doc.get("code", "")),
            provider=str(doc.get("provider") or ""),
            offering=str(doc.get("offering") or ""),
            count=int(doc.get("count") or 0),
            until=float(until) if isinstance(until, int | float) else None,
            detail=str(doc.get("detail") or ""),
        )

    def describe(self) -> str:
        """One phrase: ``launched 4 on sim c8``, ``backoff on sim c8@a until 12:31:05``."""
        where = " ".join(part for part in (self.provider, self.offering) if part)
        head = f"{self.code} {self.count}" if self.code == LAUNCHED else self.code
        text = f"{head} on {where}" if where else head
        if self.until is not None:
            text += f" until {clock_time(self.until)}"
        return text


def clock_time(unix: float) -> str:
    """``HH:MM:SS`` UTC (the daemon's times are UTC everywhere it shows them)."""
    return time.strftime("%H:%M:%S", time.gmtime(unix))


def reasons_of(decision: ScaleOutDecision) -> list[Reason]:
    """The reasons of one decision (module docstring's table), providers in priority order."""
    name, evidence = decision.template, decision.evidence
    if decision.outcome in ("no-gap", "unknown-template"):
        return []
    if decision.outcome == "breaker-open":
        breaker = evidence.get("breaker") or {}
        detail = str(breaker.get("reason") or "the template's circuit breaker is open")
        return [Reason(name, "breaker-open", until=_number(breaker.get("reopens_at")), detail=detail)]
    if decision.outcome == "breaker-probe":
        detail = "half-open: one probe was sent, its bootstrap or join decides the breaker"
        return [Reason(name, "breaker-open", detail=detail)]
    if decision.outcome == "cooldown":
        cooldown = evidence.get("cooldown") or {}
        detail = f"policy.cooldown {cooldown.get('cooldown', '?')}s after the last scale-up"
        return [Reason(name, "cooldown", until=_number(cooldown.get("until")), detail=detail)]
    out: list[Reason] = []
    for entry in evidence.get("providers") or []:
        if isinstance(entry, Mapping):
            out += _provider_reasons(name, entry)
    if decision.outcome in ("partial", "no-room") and all(r.code == LAUNCHED for r in out):
        out += _remainder(name, evidence.get("providers") or [])
    if not out and decision.ops:  # evidence without providers (a report made by hand): the ops say it
        out = [Reason(name, LAUNCHED, op.provider, count=op.count) for op in decision.ops]
    if not out:  # nothing asked at all: no provider could take any of it
        out.append(Reason(name, "no-offering", detail="no provider of the template could take it"))
    return out


def _provider_reasons(template: str, entry: Mapping[str, Any]) -> list[Reason]:
    provider = str(entry.get("provider", ""))
    skipped = str(entry.get("skipped") or "")
    count = int(entry.get("count") or 0)
    until = _number(entry.get("until"))
    if not skipped and count > 0:
        placed = [o for o in entry.get("offerings") or [] if isinstance(o, Mapping) and int(o.get("count") or 0) > 0]
        if placed:
            return [Reason(template, LAUNCHED, provider, str(o.get("offering", "")), int(o["count"])) for o in placed]
        return [Reason(template, LAUNCHED, provider, count=count)]
    if skipped in ("unavailable", "no-lease", "open-op"):  # "unavailable": before the policy named them
        why = str(entry.get("reason") or "")
        if skipped == "open-op" or why.startswith("op "):
            match = _RETRY_AT.search(why)
            at = float(match.group(1)) if match else until
            return [Reason(template, "open-op", provider, until=at, detail=why or "a failed op awaits its retry")]
        return [Reason(template, "no-lease", provider, detail=why or "no valid lease")]
    found = entry.get("block")
    block: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    failure = f"{block.get('class')} failure: {block.get('text') or ''}" if block else ""
    if skipped == "failed":
        code = "quota" if block.get("class") == "quota" else "backoff"
        return [Reason(template, code, provider, until=_number(block.get("until"), until), detail=failure)]
    if skipped == "backoff":
        held = [o for o in entry.get("offerings") or [] if isinstance(o, Mapping) and o.get("skipped") == "backoff"]
        if held:
            return [
                Reason(
                    template, "backoff", provider, str(o.get("offering", "")), until=_number(o.get("until"), until),
                    detail=failure or "refused for capacity: probed again after its backoff",
                )
                for o in held
            ]  # fmt: skip
    room = entry.get("room") or {}
    fits = int(room.get("fits") or 0) if isinstance(room, Mapping) else 0
    if fits > 0 and count <= 0 and skipped not in ("backoff", "quota", "no-offering"):
        granule = entry.get("granularity")
        detail = f"room for {fits}, below one granule of {granule}"
        return [Reason(template, "granularity", provider, detail=detail)]
    mapped = _SKIPPED.get(skipped)
    if mapped is None:
        return [Reason(template, "no-offering", provider, detail=skipped or "nothing fits")] if count <= 0 else []
    return [Reason(template, mapped, provider, until=until, detail=failure or _room_detail(skipped, room))]


def _remainder(template: str, entries: Sequence[Any]) -> list[Reason]:
    """Why the rest of a partial decision found no room: the last provider that launched took
    what its room allowed (a whole number of granules); its binding limit held the rest."""
    last = next((e for e in reversed(entries) if isinstance(e, Mapping) and int(e.get("count") or 0) > 0), None)
    if last is None:
        return []
    room = last.get("room") or {}
    fits, count = int(room.get("fits") or 0), int(last.get("count") or 0)
    granule = int(last.get("granularity") or 1)
    provider = str(last.get("provider", ""))
    if 0 < fits - count < granule:
        return [
            Reason(
                template,
                "granularity",
                provider,
                detail=f"room for {fits - count} more, below one granule of {granule}",
            )
        ]
    limit = str(room.get("limit") or "")
    return [
        Reason(
            template, _SKIPPED.get(limit, "no-offering"), provider, detail=_room_detail(limit, room) or "nothing fits"
        )
    ]


def _room_detail(limit: str, room: Any) -> str:
    if not isinstance(room, Mapping) or not room:
        return limit
    figures = {
        "max_instances": f"{room.get('instances')} of max_instances {room.get('max_instances')}",
        "template max_instances": f"template max_instances {room.get('template_max_instances')}",
        "provider budget": f"spend {room.get('provider_spend')} of budget {room.get('provider_budget')}/h",
        "cluster budget": f"spend {room.get('cluster_spend')} of budget {room.get('cluster_budget')}/h",
        "group budget": (
            f"group {room.get('group')} spend {room.get('group_spend')} of budget {room.get('group_budget')}/h"
        ),
        "group month budget": (
            f"group {room.get('group')} spent {room.get('group_month_spent')} this month"
            f" + {room.get('group_spend')}/h for {room.get('month_lookahead_hours')} h"
            f" of budget {room.get('group_month_budget')}/month"
        ),
    }
    return f"{limit}: {figures[limit]}" if limit in figures else limit


def _number(value: Any, default: float | None = None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def pass_reasons(decisions: Iterable[ScaleOutDecision]) -> dict[str, list[Reason]]:
    """Per template, the reasons of one pass's decisions (rounds in order; module docstring);
    templates with none (no gap) are left out."""
    rounds: dict[str, list[list[Reason]]] = {}
    for decision in decisions:
        rounds.setdefault(decision.template, []).append(reasons_of(decision))
    out: dict[str, list[Reason]] = {}
    for template, seen in sorted(rounds.items()):
        last = seen[-1]
        named = {r.provider for r in last}
        earlier = [r for found in seen[:-1] for r in found if r.code == LAUNCHED and r.provider not in named]
        merged = earlier + last
        if merged:
            out[template] = merged
    return out


def primary(template: str, reasons: Sequence[Reason]) -> Reason | None:
    """What the controller is told: the first reason (by provider priority) that held unmet
    demand back, else ``launched``; its detail names every provider's reason in one line."""
    if not reasons:
        return None
    held = [r for r in reasons if r.code != LAUNCHED]
    first = held[0] if held else reasons[0]
    line = "; ".join(r.describe() for r in reasons)
    return Reason(template, first.code, first.provider, first.offering, first.count, first.until, line)


def reasons_json(reasons: Mapping[str, Sequence[Reason]]) -> dict[str, list[dict[str, Any]]]:
    """``{template: [reason, ...]}`` JSON-ready."""
    return {template: [r.to_json() for r in found] for template, found in sorted(reasons.items())}


def reasons_from_json(doc: Any) -> dict[str, list[Reason]]:
    """The reverse of :func:`reasons_json` (anything malformed is left out)."""
    if not isinstance(doc, Mapping):
        return {}
    return {
        str(t): [Reason.from_json(r) for r in found if isinstance(r, Mapping)]
        for t, found in doc.items()
        if isinstance(found, list)
    }


def held_line(template: str, wanted: int, reasons: Sequence[Reason]) -> str:
    """The status text's line: ``cpu: 4 wanted, launched 2 on sim, held: quota on aws until 13:02:00``."""
    parts = [f"{template}: {wanted} wanted", *(r.describe() for r in reasons if r.code == LAUNCHED)]
    held = [r.describe() for r in reasons if r.code != LAUNCHED]
    if held:
        parts.append(f"held: {'; '.join(held)}")
    return ", ".join(parts)
