"""What the status document and the metrics take from a pass's report, typed.

:meth:`PassFigures.of` reads them from the pass's typed report
(:class:`~orchestrator.reconcile.report.PassReport`): that is how the daemon sets its metrics
after a pass. :meth:`PassFigures.from_json` reads the same figures from a ``last_pass`` document
(one written before, or made by hand in a test); the two agree on every report
(tests/unit/daemon/test_daemon_statusdoc_golden.py), so the metrics never depend on which one
the figures came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.reconcile.report import PassReport
from orchestrator.reconcile.results import JoinResult, ReclaimResult


@dataclass(frozen=True)
class PhaseRan:
    """One phase of the pass: ``failed`` when it ran and did not go through (skipped is no failure)."""

    name: str
    ok: bool
    skipped: str

    @property
    def failed(self) -> bool:
        """Ran, and did not go through."""
        return not self.ok and not self.skipped


@dataclass(frozen=True)
class TemplateRow:
    """One template's demand, hosts on their way (in flight, awaited, unreflected) and gap."""

    wanted: int
    supply: int
    gap: int


@dataclass(frozen=True)
class Candidate:
    """What the named timeouts need of a reclaim candidate."""

    provider: str
    reason: str  # "idle" | "lifetime" | "closed"


@dataclass(frozen=True)
class PassFigures:
    """The figures of one pass the status document and the metrics use."""

    trigger: str
    finished: float | None  # None: the document names no end (nothing to count)
    ops: int
    phases: tuple[PhaseRan, ...]
    # Keys returned this pass: past their join_deadline (join tracking), reclaimed (reclaim).
    unjoined: tuple[str, ...]
    reclaimed: tuple[str, ...]
    candidates: Mapping[str, Candidate]  # by instance key
    templates: Mapping[str, TemplateRow]
    # Providers passed over, as (provider, template); None when the report says nothing of them.
    blocked: tuple[tuple[str, str], ...] | None
    # First-boot hosts returned this pass after a failed boot (``FirstBootFailure`` rows).
    first_boot_failed: tuple[Mapping[str, str], ...] = ()
    # Refusals the pass recorded in the memory of refusals: {scope, provider, placement} each.
    refused: tuple[Mapping[str, str], ...] = ()

    @property
    def read_ok(self) -> bool:
        """The read went through: the pass knew the demand."""
        return any(p.name == "read" and p.ok for p in self.phases)

    @classmethod
    def of(cls, report: PassReport) -> PassFigures:
        """The figures of a pass's typed report."""
        join = report.result("join-tracking", JoinResult)
        reclaim = report.result("reclaim", ReclaimResult)
        return cls(
            trigger=report.trigger,
            finished=report.finished,
            ops=len(report.ops),
            phases=tuple(PhaseRan(p.name, p.ok, p.skipped) for p in report.phases),
            unjoined=tuple(join.returned) if join is not None else (),
            reclaimed=tuple(reclaim.returned) if reclaim is not None else (),
            candidates={c.key: Candidate(c.provider, c.reason) for c in report.reclaim_candidates},
            templates={t: TemplateRow(g.wanted, g.supply, g.gap) for t, g in report.gaps.items()},
            blocked=tuple((b.provider, b.template) for b in report.blocked),
            first_boot_failed=tuple(asdict(f) for f in join.first_boot_failed) if join is not None else (),
            refused=tuple(report.to_json_refused()),
        )

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> PassFigures:
        """The figures of a ``last_pass`` document (None or ``{}``: a pass that reported nothing);
        members missing from it read as nothing done."""
        doc = doc or {}
        phases = [p for p in doc.get("phases", []) if isinstance(p, Mapping)]
        by_name = {p.get("name"): p for p in phases}

        def returned(name: str) -> tuple[str, ...]:
            evidence = (by_name.get(name) or {}).get("evidence", {})
            return tuple(str(key) for key in evidence.get("returned", []))

        gaps: Mapping[str, Mapping[str, Any]] = doc.get("gaps", {})
        return cls(
            trigger=str(doc.get("trigger", "-")),
            finished=float(doc["finished"]) if "finished" in doc else None,
            ops=len(doc.get("ops", [])),
            phases=tuple(
                PhaseRan(str(p["name"]), bool(p.get("ok", True)), str(p.get("skipped") or "")) for p in phases
            ),
            unjoined=returned("join-tracking"),
            reclaimed=returned("reclaim"),
            candidates={
                str(c.get("key")): Candidate(str(c.get("provider", "")), str(c.get("reason", "")))
                for c in doc.get("reclaim_candidates", [])
                if isinstance(c, Mapping)
            },
            templates={str(t): _row(g) for t, g in gaps.items()},
            blocked=(
                tuple((str(b["provider"]), str(b["template"])) for b in doc["blocked"]) if "blocked" in doc else None
            ),
            first_boot_failed=tuple(
                {str(k): str(v) for k, v in row.items()}
                for row in ((by_name.get("join-tracking") or {}).get("evidence") or {}).get("first_boot_failed", [])
                if isinstance(row, Mapping)
            ),
            refused=tuple(
                {str(k): str(v) for k, v in row.items()} for row in doc.get("refused", []) if isinstance(row, Mapping)
            ),
        )


def _row(gap: Mapping[str, Any]) -> TemplateRow:
    """A ``gaps`` entry (``TemplateGap.evidence``): in flight is every host on its way."""
    supply = int(gap["in_flight"]) + int(gap.get("awaited", 0)) + int(gap.get("unreflected", 0))
    return TemplateRow(int(gap["wanted"]), supply, int(gap["gap"]))
