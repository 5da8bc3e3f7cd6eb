"""What a run comes to: the figures ``xceprov replay`` prints, for the replay and the recording.

The same shape for both, so they are printed side by side and plotted on one chart: money (the
ledger's ``cost_items`` over the run's instances, priced by the candidate configuration for
both runs so the difference is the policy's, docs/replay.md), host-hours, pending host-minutes
(the integral of hosts' worth of queued work not started: demand not met), launches, returns,
losses; and a series of samples over time for the charts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    """The world at ``t``: hosts' worth of work (``demand``: pending + busy), instances live
    (``supply``), money spent since the start (``spend``)."""

    t: float
    demand: int
    supply: int
    spend: float

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "demand": self.demand, "supply": self.supply, "spend": round(self.spend, 6)}


@dataclass(frozen=True)
class RunFigures:
    """One run over ``[start, end)``: its totals, per template, and its samples."""

    label: str  # "recorded" or "replayed" (or a name given)
    start: float
    end: float
    cost: float
    host_hours: float
    pending_host_minutes: float
    launches: int
    returns: int
    lost: int
    by_template: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    samples: Sequence[Sample] = ()

    def to_json(self, samples: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "start": self.start,
            "end": self.end,
            "cost": round(self.cost, 6),
            "host_hours": round(self.host_hours, 6),
            "pending_host_minutes": round(self.pending_host_minutes, 3),
            "launches": self.launches,
            "returns": self.returns,
            "lost": self.lost,
            "by_template": {t: dict(v) for t, v in sorted(self.by_template.items())},
        }
        if samples:
            out["samples"] = [s.to_json() for s in self.samples]
        return out
