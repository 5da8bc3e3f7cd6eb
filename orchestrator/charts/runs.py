"""``xceprov replay --plot``: runs side by side, demand against supply and spend over time.

One column per run (the recorded and the replayed run of the same period, docs/replay.md), the
same y scale along each row so the columns compare at a glance: on top the hosts' worth of work
(demand: pending + busy) and the instances live (supply) as steps, below the money spent since
the start. Each column's title carries the run's totals, the figures ``xceprov replay`` prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from orchestrator.charts.output import ChartError, render
from orchestrator.charts.timeaxis import dates, utc_axis
from orchestrator.replay.figures import RunFigures

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Inches: a column per run, two rows.
COLUMN_WIDTH: Final = 6.4
HEIGHT: Final = 7.0


def run_title(run: RunFigures) -> str:
    """The column's title: the run's label and its totals."""
    return (
        f"{run.label}\ncost {run.cost:.2f}, {run.host_hours:.1f} host-hours, "
        f"{run.pending_host_minutes:.0f} pending host-minutes"
    )


def _hosts(axes: Axes, run: RunFigures) -> None:
    times = dates([s.t for s in run.samples])
    axes.step(times, [s.demand for s in run.samples], where="post", linewidth=2.5, label="demand (hosts of work)")
    axes.step(times, [s.supply for s in run.samples], where="post", label="supply (instances live)")
    axes.set_ylabel("hosts")
    axes.legend(loc="upper left")


def _spend(axes: Axes, run: RunFigures) -> None:
    axes.plot(dates([s.t for s in run.samples]), [s.spend for s in run.samples], color="tab:green")
    axes.set_ylabel("money spent since the start")


def write_run_chart(runs: Sequence[RunFigures], path: Path, title: str = "") -> None:
    """Write ``runs`` side by side to ``path`` (``.png`` or ``.svg``; ``ChartError`` otherwise)."""
    if not runs:
        raise ChartError(f"{path}: no run to chart")

    def draw(figure: Figure) -> None:
        grid = figure.subplots(2, len(runs), sharey="row", squeeze=False)
        for column, run in enumerate(runs):
            top, bottom = grid[0][column], grid[1][column]
            top.set_gid(f"run-{column}-hosts")
            bottom.set_gid(f"run-{column}-spend")
            top.set_title(run_title(run))
            if run.samples:
                _hosts(top, run)
                _spend(bottom, run)
            else:
                for axes in (top, bottom):
                    axes.text(0.5, 0.5, "no samples", ha="center", va="center", transform=axes.transAxes)
            for axes in (top, bottom):
                axes.grid(True, alpha=0.3)
                if run.samples:
                    utc_axis(axes)
        for row in grid:  # once every column is drawn: the rows' shared scales start at 0
            row[0].set_ylim(bottom=0)
        if title:
            figure.suptitle(title)

    render(path, COLUMN_WIDTH * len(runs), HEIGHT, draw)
