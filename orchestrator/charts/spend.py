"""``xceprov cost --plot``: money spent over a period, cumulative, per provider, template, host
group or op (docs/cost.md, "Charts").

From the ledger's items alone (``reconcile/costs.py`` priced them): each item's money is spread
evenly over its life inside the period, so each curve ends at exactly the total ``xceprov cost``
prints. Even spreading is exact for an instance at one price; for a warm-pool instance (stopped
price, then running price) the curve between its launch and its end is its average, its end
point exact. By provider, template or op the groups part the instances, so their areas are
stacked and the top edge is the total; by host group an instance counts under each of its
groups (as the totals do), so each group is a line of its own beside a line of the total.
The ``MOST`` largest groups are drawn, the rest are summed as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from orchestrator.charts.output import ChartError, render
from orchestrator.charts.timeaxis import dates, utc_axis
from orchestrator.model.costs import BY, NO_GROUP, CostItem, spread_spend, window

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MOST: Final = 8
WIDTH: Final = 9.0
HEIGHT: Final = 5.0


@dataclass(frozen=True)
class SpendSeries:
    """Cumulative money at each of ``times`` per name (largest total first), and in all."""

    times: tuple[float, ...]
    by_name: dict[str, tuple[float, ...]]
    total: tuple[float, ...]
    stacked: bool  # the names part the instances (not by group)


def _names(item: CostItem, by: str) -> tuple[str, ...]:
    if by == "group":
        return item.groups or (NO_GROUP,)
    return ({"provider": item.provider, "template": item.template, "op": item.op_id}[by],)


def spend_series(items: Sequence[CostItem], since: float, until: float, by: str) -> SpendSeries:
    """The curves of ``write_cost_chart``: from ``since`` (or the first launch in the period
    when ``since`` is 0, the beginning) to ``until``, a point wherever a rate changes."""
    if by not in BY:
        raise ChartError(f"cannot chart costs by {by!r}: expected one of {', '.join(BY)}")
    spans = [(*window(item, since, until), item) for item in items]
    spans = [(a, b, item) for a, b, item in spans if b > a]
    left = since if since > 0 or not spans else min(a for a, _, _ in spans)
    times = tuple(sorted({left, until, *(t for a, b, _ in spans for t in (a, b) if left <= t <= until)}))
    grouped: dict[str, list[tuple[float, float, float]]] = {}
    for a, b, item in spans:
        for name in _names(item, by):
            grouped.setdefault(name, []).append((a, b, item.cost))
    order = sorted(grouped, key=lambda n: (-sum(c for _, _, c in grouped[n]), n))
    if len(order) > MOST:  # the rest as one: each instance once, even in several of them
        rest = set(order[MOST - 1 :])
        order = [*order[: MOST - 1], f"{len(rest)} others"]
        grouped[order[-1]] = [(a, b, item.cost) for a, b, item in spans if rest & set(_names(item, by))]
    return SpendSeries(
        times=times,
        by_name={name: spread_spend(grouped[name], times) for name in order},
        total=spread_spend(((a, b, item.cost) for a, b, item in spans), times),
        stacked=by != "group",
    )


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


def write_cost_chart(items: Sequence[CostItem], path: Path, since: float, until: float, by: str) -> None:
    """Write the spend of ``[since, until)`` by ``by`` to ``path`` (``.png`` or ``.svg``)."""
    series = spend_series(items, since, until, by)
    total = series.total[-1] if series.total else 0.0

    def draw(figure: Figure) -> None:
        axes = figure.subplots()
        axes.set_gid("spend")
        start = series.times[0] if series.times else since
        figure.suptitle(
            f"spend by {by}, {_utc(start)} to {_utc(until)} UTC: "
            f"total {total:.2f} over {len(items)} instance(s)"
            + ("\n(an instance of a template in several host groups counts under each)" if by == "group" else "")
        )
        if not series.by_name:
            axes.text(0.5, 0.5, "nothing cost anything in the period", ha="center", va="center")
            axes.set_axis_off()
            return
        x = dates(series.times)
        labels = [f"{name}: {values[-1]:.2f}" for name, values in series.by_name.items()]
        if series.stacked:
            axes.stackplot(x, *series.by_name.values(), labels=labels, alpha=0.8)
        else:
            for label, values in zip(labels, series.by_name.values(), strict=True):
                axes.plot(x, values, label=label)
            axes.plot(x, series.total, label=f"total: {total:.2f}", color="black", linestyle="--")
        axes.set_ylabel("money spent (cumulative)")
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="upper left", title=by)
        utc_axis(axes)

    render(path, WIDTH, HEIGHT, draw)
