"""The time axis every chart shares: Unix seconds shown as UTC dates and times.

UTC, not the local zone: the facts, the recordings and ``xceprov cost``'s period are Unix times,
and a chart made on one machine is looked at on others (docs/replay.md, "Charts").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from matplotlib.axes import Axes


DAY: Final = 86400.0


def dates(times: Iterable[float]) -> list[float]:
    """Unix seconds as matplotlib's date numbers: days since its epoch, which ``output.RC`` pins
    to 1970-01-01T00:00:00 UTC (what ``matplotlib.dates.date2num`` computes, without a datetime
    per point)."""
    return [t / DAY for t in times]


def utc_axis(axes: Axes) -> None:
    """Label ``axes``' x axis with concise UTC dates and times."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    axes.set_xlabel("time (UTC)")
