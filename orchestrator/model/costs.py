"""What bursting cost: one item per instance, its seconds running and stopped within a period,
its money, and totals by provider, template, host group or op (docs/cost.md). No I/O.

The instance's start is the cloud's own launch time, carried by its ``instanceCreated`` fact
(``detail`` ``{"launch_time": "<RFC 3339>"}``, :func:`launch_detail`, written by the create op
from Terraform's ``instances`` output); a fact written before this version has none and the
start is the fact's commit time (later than the launch by the apply's remainder).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

# What ``--by`` may name.
BY: Final = ("provider", "template", "group", "op")
# The group of an instance whose template names no host group.
NO_GROUP: Final = "-"
# Hours of the live instances' spend per hour a budget per month counts ahead (reconcile/budget.py).
MONTH_LOOKAHEAD_HOURS: Final = 1.0


def launch_detail(instance: Mapping[str, Any]) -> str:
    """The ``instanceCreated`` fact's detail: the cloud's launch time ("" when it gave none)."""
    launched = instance.get("launch_time")
    return json.dumps({"launch_time": launched}) if isinstance(launched, str) and launched else ""


def launch_time_of(detail: str) -> float | None:
    """Unix seconds of the launch time a fact's detail carries (None when it carries none)."""
    if not detail.startswith("{"):
        return None
    try:
        doc = json.loads(detail)
        text = doc.get("launch_time") if isinstance(doc, dict) else None
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() if text else None
    except ValueError:
        return None


def ended_time_of(detail: str) -> float | None:
    """Unix seconds of the cloud's termination time a ``lost`` fact's detail carries (the
    listing's ``terminated_at``, ``ops/hostloss.py``); None when it carries none."""
    if not detail.startswith("{"):
        return None
    try:
        doc = json.loads(detail)
        listing = doc.get("listing") if isinstance(doc, dict) else None
        text = listing.get("terminated_at") if isinstance(listing, dict) else None
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() if text else None
    except ValueError:
        return None


def month_of(now: float) -> tuple[float, float]:
    """The calendar month (UTC) ``now`` falls in: its first second and the next month's."""
    at = datetime.fromtimestamp(now, UTC)
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start.timestamp(), end.timestamp()


@dataclass(frozen=True)
class MonthSpend:
    """What each host group spent in the calendar month (UTC) up to ``now`` (the ledger's
    items since the month's start), read by the budgets per month (``reconcile/budget.py``)."""

    now: float
    start: float
    end: float
    spent: Mapping[str, float]

    @property
    def lookahead(self) -> float:
        """Hours of the spend per hour a budget per month counts ahead: one, or what is left of
        the month when less (what runs after it is the next month's)."""
        return min(MONTH_LOOKAHEAD_HOURS, max(0.0, self.end - self.now) / 3600.0)


def overlap(start: float, end: float, since: float, until: float) -> float:
    """Seconds of ``[start, end)`` inside ``[since, until)`` (0 when they do not meet)."""
    return max(0.0, min(end, until) - max(start, since))


@dataclass(frozen=True)
class Stretch:
    """A stretch of an instance's life at one price per hour."""

    start: float
    end: float
    cost_per_hour: float
    stopped: bool = False


@dataclass(frozen=True)
class CostItem:
    """One instance's cost within a period."""

    key: str
    op_id: str
    provider: str
    template: str
    offering: str
    groups: tuple[str, ...]
    instance_id: str
    start: float
    end: float | None  # None: still live
    running_seconds: float
    stopped_seconds: float
    cost: float

    def to_json(self) -> dict[str, object]:
        """JSON-ready (``xceprov cost --json``'s ``instances``)."""
        return {
            "key": self.key,
            "op": self.op_id,
            "provider": self.provider,
            "template": self.template,
            "offering": self.offering,
            "groups": list(self.groups),
            "instance_id": self.instance_id,
            "start": self.start,
            "end": self.end,
            "running_seconds": round(self.running_seconds, 3),
            "stopped_seconds": round(self.stopped_seconds, 3),
            "cost": round(self.cost, 6),
        }


def item_of(
    identity: Mapping[str, Any], stretches: Iterable[Stretch], since: float, until: float, end: float | None
) -> CostItem:
    """The item of one instance: every stretch clipped to ``[since, until)``, per second."""
    running = stopped = cost = 0.0
    first: float | None = None
    for stretch in stretches:
        first = stretch.start if first is None else min(first, stretch.start)
        seconds = overlap(stretch.start, stretch.end, since, until)
        if stretch.stopped:
            stopped += seconds
        else:
            running += seconds
        cost += seconds * stretch.cost_per_hour / 3600.0
    return CostItem(
        **identity, start=first or 0.0, end=end, running_seconds=running, stopped_seconds=stopped, cost=cost
    )


def totals(items: Iterable[CostItem], by: str) -> dict[str, float]:
    """Money per provider, template, op or host group; an instance in several groups is counted
    whole under each (so group totals may add up to more than the total), one in none under ``-``."""
    out: dict[str, float] = {}
    for item in items:
        if by == "group":
            names: tuple[str, ...] = item.groups or (NO_GROUP,)
        else:
            names = ({"provider": item.provider, "template": item.template, "op": item.op_id}[by],)
        for name in names:
            out[name] = out.get(name, 0.0) + item.cost
    return dict(sorted(out.items()))


def window(item: CostItem, since: float, until: float) -> tuple[float, float]:
    """The stretch of ``[since, until)`` the item's life covers (a live one: up to ``until``)."""
    end = until if item.end is None else min(item.end, until)
    return max(item.start, since), end


def spread_spend(spans: Iterable[tuple[float, float, float]], times: Sequence[float]) -> tuple[float, ...]:
    """Money spent by each of ``times`` (in increasing order) of spans ``(start, end, money)``,
    each spread evenly over itself: exact for an instance at one price, a warm-pool instance's
    stopped and running stretches averaged (the charts' and the replay's spend over time)."""
    changes: dict[float, float] = {}  # time → change of the rate (money per second)
    for start, end, money in spans:
        if end > start and money:
            rate = money / (end - start)
            changes[start] = changes.get(start, 0.0) + rate
            changes[end] = changes.get(end, 0.0) - rate
    out: list[float] = []
    pending = sorted(changes.items())
    rate = spent = 0.0
    last = times[0] if times else 0.0
    index = 0
    for t in times:
        while index < len(pending) and pending[index][0] <= t:
            at, change = pending[index]
            spent += rate * (at - last)
            last, rate = at, rate + change
            index += 1
        spent += rate * (t - last)
        last = t
        out.append(spent)
    return tuple(out)
