"""The loop's book of open ops whose last attempt failed, and how a failed create is told.

:class:`FailedOp` is what the loop keeps per op until it is retried or closed;
:func:`tell_failed_create` writes the log line and the audit entry of a failed create with its
class and the retry decision (docs/daemon.md, "Failures and fallback").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from orchestrator.reconcile.classify import Classification, FailureClass
from orchestrator.reconcile.retry import RetryDecision
from orchestrator.workspace.audit import audit

# The loop's logger, as before this module (log filters keep working).
log = logging.getLogger("orchestrator.reconcile.loop")


@dataclass
class FailedOp:
    """An open op whose last attempt failed: when it may be tried again, and why it failed."""

    op_id: str
    provider: str
    template: str
    kind: str  # "create" | "return"
    attempts: int
    retry_at: float
    error: str
    # The failure's class ("transient" also when the controller went away): after a refusal the
    # cloud made none of the failed instances, so closing the op needs no listing of the cloud.
    failure: str = FailureClass.TRANSIENT.value


def tell_failed_create(state_dir: Path, failed: FailedOp, failure: Classification, decision: RetryDecision) -> None:
    """The log line and the audit entry (``reconcile-op-failed``) of a failed create."""
    log.warning(
        "op %s on %s failed (%s), %s: %s",
        failed.op_id,
        failed.provider,
        failure.kind.value,
        decision.action,
        failed.error,
        extra={"op_id": failed.op_id, "provider": failed.provider, "template": failed.template},
    )
    audit(
        state_dir,
        "reconcile-op-failed",
        provider=failed.provider,
        op=failed.op_id,
        template=failed.template,
        kind=failed.kind,
        failure=failure.evidence(),
        decision=decision.action,
        evidence=decision.evidence,
        attempts=failed.attempts,
    )
