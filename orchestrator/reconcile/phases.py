"""Running one phase of a pass, isolated, and taking in the resumes that ended beside it.

:func:`run_phase` is the isolation of docs/daemon.md ("The reconcile pass"): a phase that raises
is logged and audited (``phase-failed`` with its name and the error) and becomes a failed
:class:`~orchestrator.reconcile.report.PhaseOutcome`; the pass goes on with the next phase.
:func:`beside_failed` and :func:`join_beside` are the pass's side of :mod:`.beside`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from orchestrator.reconcile.beside import Resumed
from orchestrator.reconcile.passctx import PassContext
from orchestrator.reconcile.report import PhaseOutcome
from orchestrator.reconcile.results import GainedResume, PhaseResult, Skipped
from orchestrator.workspace.audit import audit

# The loop's logger, as before the phases had a module of their own (log filters keep working).
log = logging.getLogger("orchestrator.reconcile.loop")


def run_phase(state_dir: Path, name: str, step: Callable[[PassContext], PhaseResult], ctx: PassContext) -> PhaseOutcome:
    """``step(ctx)`` as the phase ``name``: its outcome, a failed one when it raised."""
    try:
        result = step(ctx)
    except Exception as exc:  # isolation: one phase's failure never stops the others
        error = f"{type(exc).__name__}: {one_line(exc)}"
        log.exception("reconcile phase %s failed", name)
        audit(state_dir, "phase-failed", phase=name, error=error)
        return PhaseOutcome(name, False, error=error)
    skipped = result.reason if isinstance(result, Skipped) else ""
    errors = list(result.errors)
    if errors:
        audit(state_dir, "phase-failed", phase=name, error=errors[0], errors=errors)
    return PhaseOutcome(name, not errors, skipped=skipped, error=errors[0] if errors else "", evidence=result)


def beside_failed(state_dir: Path, provider: str, error: str, skipped: str) -> PhaseOutcome:
    """The resume of ``provider`` beside the pass did not run its phase to the end."""
    if error:
        audit(state_dir, "phase-failed", phase="resume", provider=provider, error=error)
    return PhaseOutcome("resume", not error, skipped=skipped, error=error, evidence=GainedResume([provider]))


def join_beside(ctx: PassContext, phases: list[PhaseOutcome], done: list[Resumed[PhaseOutcome]]) -> None:
    """Resumes that ended beside the pass: reported, and their providers leased from now on."""
    for resumed in done:
        phases.append(resumed.outcome)
        if resumed.joined:
            ctx.joined(resumed.provider)


def one_line(exc: BaseException) -> str:
    """The first line of an error's text (its class name when it has none), at most 500 characters."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
