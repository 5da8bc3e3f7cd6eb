"""What one reconcile pass saw and did: its phases' outcomes and the pass's report.

:class:`PassReport` is what :meth:`~orchestrator.reconcile.loop.Reconciler.run_once` returns; the
daemon writes its :meth:`~PassReport.to_json` to ``status.json`` (``last_pass``, docs/daemon.md
"Status file") and sets its metrics from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASES = ("read", "resume", "scale-out", "bootstrap", "join-tracking", "reclaim")


@dataclass(frozen=True)
class PhaseOutcome:
    """How one phase of a pass went."""

    name: str  # "read" | "resume" | "scale-out" | "bootstrap" | "join-tracking" | "reclaim"
    ok: bool
    skipped: str = ""  # why the phase did not run (e.g. "read failed: controller unreachable")
    error: str = ""  # one line; the loop goes on
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "name": self.name,
            "ok": self.ok,
            "skipped": self.skipped,
            "error": self.error,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class PassReport:
    """What one pass saw and did: the daemon's status and metrics are made from it."""

    trigger: str  # "start" | "interval" | "demand" | "host-event" | "reload"
    started: float
    finished: float
    phases: list[PhaseOutcome]
    gaps: dict[str, dict[str, Any]]  # template -> TemplateGap.evidence()
    ops: list[str]  # op ids started this pass
    reclaim_candidates: list[dict[str, Any]]  # host, provider, key, reason, idle_since, age
    # Providers whose lease was valid at the read, or came during the pass (joined once their
    # resume beside the pass ended, see beside.py).
    leased: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # scale-out decisions with evidence
    # Providers passed over after failures at the pass's end (``health.Block.evidence``): the
    # backoff of docs/daemon.md, "Metrics" (``xceprov_provider_backoff``).
    blocked: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every phase that ran went through."""
        return all(p.ok for p in self.phases)

    def phase(self, name: str) -> PhaseOutcome:
        """The outcome of the phase ``name``."""
        return next(p for p in self.phases if p.name == name)

    def to_json(self) -> dict[str, Any]:
        """The document the daemon writes to ``status.json`` (``pass`` member)."""
        return {
            "trigger": self.trigger,
            "started": self.started,
            "finished": self.finished,
            "duration": round(self.finished - self.started, 6),
            "ok": self.ok,
            "phases": [p.to_json() for p in self.phases],
            "gaps": self.gaps,
            "ops": list(self.ops),
            "reclaim_candidates": list(self.reclaim_candidates),
            "leased": list(self.leased),
            "decisions": list(self.decisions),
            "blocked": list(self.blocked),
        }
