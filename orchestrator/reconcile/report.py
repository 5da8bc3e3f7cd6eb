"""What one reconcile pass saw and did: its phases' outcomes and the pass's report.

:class:`PassReport` is what :meth:`~orchestrator.reconcile.loop.Reconciler.run_once` returns,
typed all the way down (each phase's result is one of :mod:`.results`); the daemon writes its
:meth:`~PassReport.to_json` to ``status.json`` (``last_pass``, docs/daemon.md "Status file")
and sets its metrics from its fields. ``to_json`` is the one place the report becomes JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.health import Block
from orchestrator.reconcile.reasons import Reason, pass_reasons, reasons_json
from orchestrator.reconcile.reclaim import ReclaimCandidate
from orchestrator.reconcile.refusals import Refusal
from orchestrator.reconcile.results import PhaseResult
from orchestrator.reconcile.scaleout import ScaleOutDecision

PHASES = ("read", "resume", "scale-out", "bootstrap", "join-tracking", "reclaim")

R = TypeVar("R")


@dataclass(frozen=True)
class PhaseOutcome:
    """How one phase of a pass went."""

    name: str  # "read" | "resume" | "scale-out" | "bootstrap" | "join-tracking" | "reclaim"
    ok: bool
    skipped: str = ""  # why the phase did not run (e.g. "read failed: controller unreachable")
    error: str = ""  # one line; the loop goes on
    # What the phase found and did (None: it raised, or never ran).
    evidence: PhaseResult | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "name": self.name,
            "ok": self.ok,
            "skipped": self.skipped,
            "error": self.error,
            "evidence": self.evidence.to_json() if self.evidence is not None else {},
        }


def decision_json(decision: ScaleOutDecision) -> dict[str, Any]:
    """A scale-out decision as the report and the audit log show it."""
    return {
        "template": decision.template,
        "outcome": decision.outcome,
        "evidence": dict(decision.evidence),
        "ops": [_op_json(o) for o in decision.ops],
    }


def _op_json(op: OpRequest) -> dict[str, Any]:
    """An op of a decision: its provider, count and (when it names them) offerings in key order."""
    out: dict[str, Any] = {"provider": op.provider, "count": op.count}
    if op.placements:
        out["placements"] = [[p.offering, p.count] for p in op.placements]
    return out


@dataclass(frozen=True)
class PassReport:
    """What one pass saw and did: the daemon's status and metrics are made from it."""

    trigger: str  # "start" | "interval" | "demand" | "host-event" | "reload"
    started: float
    finished: float
    phases: list[PhaseOutcome]
    gaps: Mapping[str, TemplateGap]  # by template
    ops: list[str]  # op ids started this pass
    reclaim_candidates: list[ReclaimCandidate]
    # Providers whose lease was valid at the read, or came during the pass (joined once their
    # resume beside the pass ended, see beside.py).
    leased: list[str] = field(default_factory=list)
    decisions: list[ScaleOutDecision] = field(default_factory=list)  # scale-out decisions with evidence
    # Providers passed over after failures at the pass's end: the backoff of docs/daemon.md,
    # "Metrics" (``xceprov_provider_backoff``).
    blocked: list[Block] = field(default_factory=list)
    # The refusals this pass recorded in the memory of refusals (``xceprov_refusals_total``).
    refused: list[Refusal] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every phase that ran went through."""
        return all(p.ok for p in self.phases)

    @property
    def reasons(self) -> dict[str, list[Reason]]:
        """Per template with unmet demand or a launch, why the pass did what it did (reasons.py);
        empty when the scale-out phase decided nothing (a failed read, a skipped phase)."""
        return pass_reasons(self.decisions)

    def phase(self, name: str) -> PhaseOutcome:
        """The outcome of the phase ``name``."""
        return next(p for p in self.phases if p.name == name)

    def result(self, name: str, kind: type[R]) -> R | None:
        """The result of the phase ``name`` when it is a ``kind`` (None: it raised, was skipped
        or did not run); the last one when the phase ran more than once (resumes beside)."""
        found = [p.evidence for p in self.phases if p.name == name and isinstance(p.evidence, kind)]
        return found[-1] if found else None

    def to_json_refused(self) -> list[dict[str, str]]:
        """The refusals the pass recorded, as ``to_json`` names them (``scope``, ``provider``, ``placement``)."""
        return [{"scope": r.scope, "provider": r.provider, "placement": r.placement} for r in self.refused]

    def to_json(self) -> dict[str, Any]:
        """The document the daemon writes to ``status.json`` (``pass`` member)."""
        return {
            "trigger": self.trigger,
            "started": self.started,
            "finished": self.finished,
            "duration": round(self.finished - self.started, 6),
            "ok": self.ok,
            "phases": [p.to_json() for p in self.phases],
            "gaps": {template: gap.evidence() for template, gap in self.gaps.items()},
            "ops": list(self.ops),
            "reclaim_candidates": [c.to_json() for c in self.reclaim_candidates],
            "leased": list(self.leased),
            "decisions": [decision_json(d) for d in self.decisions],
            "reasons": reasons_json(self.reasons),
            "blocked": [b.evidence() for b in self.blocked],
            "refused": self.to_json_refused(),
        }
