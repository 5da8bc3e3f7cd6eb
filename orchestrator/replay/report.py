"""What ``xceprov replay`` prints: the replayed run next to what the recording shows happened.

Both runs' figures (:class:`~orchestrator.replay.figures.RunFigures`) side by side, with the
change from the recorded run to the replayed one (absolute, and relative where the recorded
figure is not zero); a trace has no recorded run, only the replayed column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from orchestrator.replay.figures import RunFigures

# (figure, label, decimals) in the order printed.
ROWS: Final = (
    ("cost", "cost", 2),
    ("host_hours", "host-hours", 2),
    ("pending_host_minutes", "pending host-minutes", 1),
    ("launches", "launches", 0),
    ("returns", "returns", 0),
    ("lost", "lost hosts", 0),
)


@dataclass(frozen=True)
class ReplayReport:
    """A replay's outcome: the source described, the candidate's name, both runs, the seed."""

    source: Mapping[str, Any]
    candidate: str
    replayed: RunFigures
    recorded: RunFigures | None
    seed: int
    seconds: float  # wall time the replay took

    def changes(self) -> dict[str, dict[str, float | None]]:
        """Per figure: replayed − recorded and that as a fraction of recorded (None: recorded is 0)."""
        if self.recorded is None:
            return {}
        out: dict[str, dict[str, float | None]] = {}
        for name, _label, _places in ROWS:
            was, now = float(getattr(self.recorded, name)), float(getattr(self.replayed, name))
            out[name] = {"change": round(now - was, 6), "relative": round((now - was) / was, 6) if was else None}
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "source": dict(self.source),
            "candidate": self.candidate,
            "seed": self.seed,
            "seconds": round(self.seconds, 3),
            "replayed": self.replayed.to_json(samples=True),
            "recorded": self.recorded.to_json(samples=True) if self.recorded is not None else None,
            "changes": self.changes(),
        }

    def text(self) -> str:
        src = self.source
        lines = [
            f"replay of {src['path']} ({src['kind']}, {_when(src['start'])} to {_when(src['end'])} UTC, "
            f"{src['jobs']} jobs, {src['refusal_windows']} refusal windows, {src['losses']} losses)",
            f"candidate configuration: {self.candidate}; seed {self.seed}; replayed in {self.seconds:.1f} s",
            "",
        ]
        runs = [r for r in (self.recorded, self.replayed) if r is not None]
        header = f"{'':<22}" + "".join(f"{r.label:>12}" for r in runs)
        lines.append(header + (f"{'change':>12}" if self.recorded is not None else ""))
        changes = self.changes()
        for name, label, places in ROWS:
            row = f"{label:<22}" + "".join(f"{float(getattr(r, name)):>12.{places}f}" for r in runs)
            if name in changes:
                row += f"{_change(changes[name]):>12}"
            lines.append(row)
        return "\n".join(lines)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _change(change: Mapping[str, float | None]) -> str:
    relative = change["relative"]
    if relative is None:
        return f"{change['change']:+.2f}"
    return f"{relative * 100:+.1f} %"
