"""The warm pool in the scale-out phase: the decisions of :mod:`.pool` carried out.

Takes come before the creates of the phase, refills and surplus returns after them
(:mod:`.pool`'s docstring says why). Each take is one start op through the fenced executor
(:meth:`~orchestrator.ops.executor.Executor.start_pool`), each refill one create op into the pool,
each surplus one return op: every one fenced, intent-first and audited like any op, and a
failed one handled by the loop's own failure handlers (the op stays open and is resumed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import Config
from orchestrator.model.instances import new_op_id
from orchestrator.ops.executor import Executor
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.passctx import PassContext
from orchestrator.reconcile.phases import one_line
from orchestrator.reconcile.pool import refills, surplus, takes
from orchestrator.reconcile.results import CreatedOp, ScaleOutResult
from orchestrator.reconcile.scaleout import PolicyInputs
from orchestrator.workspace.audit import audit

log = logging.getLogger(__name__)

# The loop's own steps, handed in (the pass's failure handling stays in one place):
Inputs = Callable[[PassContext, float], PolicyInputs]  # policy inputs as of now
Create = Callable[..., bool]  # Reconciler._create(ctx, provider, template, count, evidence, pool=True)
Failed = Callable[[PassContext, str, str, str, str, Exception], bool]  # _op_failed(ctx, p, op, t, kind, exc)
Fenced = Callable[[PassContext, str, str, LeaseLost], None]
Unreachable = Callable[[str, str, str, str, ControllerError], None]


@dataclass
class PoolPhase:
    """The pool steps of one scale-out phase (see the module docstring)."""

    config: Config
    executor: Executor
    state_dir: Path
    inputs: Inputs
    create: Create
    failed: Failed
    fenced: Fenced
    unreachable: Unreachable

    def take(self, ctx: PassContext, now: float, evidence: ScaleOutResult) -> None:
        """Start pool instances for the gaps, before any create of the phase."""
        for take in takes(self.config, self.inputs(ctx, now)):
            audit(
                self.state_dir,
                "reconcile-pool-take",
                provider=take.provider,
                template=take.template,
                keys=list(take.keys),
                evidence=dict(take.evidence),
            )
            op_id = new_op_id()
            ctx.stale(take.provider)
            try:
                result = self.executor.start_pool(take.provider, take.template, take.keys, op_id)
            except LeaseLost as exc:
                self.fenced(ctx, take.provider, op_id, exc)
                evidence.errors.append(f"op {op_id}: {one_line(exc)}")
                continue
            except ControllerError as exc:
                ctx.ops.append(op_id)
                self.unreachable(take.provider, op_id, take.template, "start", exc)
                evidence.errors.append(f"op {op_id}: {one_line(exc)}")
                continue
            except Exception as exc:
                ctx.ops.append(op_id)
                self.failed(ctx, take.provider, op_id, take.template, "start", exc)
                evidence.errors.append(f"op {op_id}: {one_line(exc)}")
                continue
            ctx.ops.append(op_id)
            fields = {"op_id": op_id, "provider": take.provider, "template": take.template, "phase": "scale-out"}
            log.info("op %s started %d pool hosts of %s", op_id, len(result.created), take.template, extra=fields)
            evidence.started.append(CreatedOp(op_id, take.provider, take.template, len(result.created)))

    def refill(self, ctx: PassContext, now: float, evidence: ScaleOutResult) -> None:
        """After the phase's creates: fill pools below target, return pools above it."""
        inputs = self.inputs(ctx, now)
        unserved = gaps_from_ledger(ctx.snapshot, inputs.records)
        for request in refills(self.config, inputs, unserved):
            audit(
                self.state_dir,
                "reconcile-pool-refill",
                provider=request.provider,
                template=request.template,
                count=request.count,
                missing=request.asked,
            )
            self.create(ctx, request.provider, request.template, request.count, evidence, pool=True)
        for provider, keys in sorted(surplus(self.config, ctx.records(), ctx.leased).items()):
            reason = "warm pool above its target"
            audit(self.state_dir, "reconcile-pool-surplus", provider=provider, keys=keys, reason=reason)
            ctx.stale(provider)
            try:
                result = self.executor.return_instances(provider, keys, reason=reason)
            except LeaseLost as exc:
                self.fenced(ctx, provider, "", exc)
                evidence.errors.append(f"pool surplus on {provider}: {one_line(exc)}")
                continue
            except Exception as exc:  # the return op stays open (resumed) or never started
                evidence.errors.append(f"pool surplus on {provider}: {one_line(exc)}")
                continue
            evidence.pool_returned.extend(result.keys)
