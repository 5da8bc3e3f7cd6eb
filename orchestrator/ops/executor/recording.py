"""Fact and audit recording under the fence's gate, one entry at a time across the shards of an op."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch, Fact
from orchestrator.ops.executor.shardaccess import ShardAccess
from orchestrator.ops.fence import epoch_tag
from orchestrator.workspace.audit import audit


class Recording(ShardAccess):
    """The gate, the facts and the audit entries of the executor's steps."""

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry (the log is the operator's evidence of every step)."""
        with self.serial:
            audit(self.config.state_dir, action, **details)

    @contextlib.contextmanager
    def action(self, name: str) -> Iterator[None]:
        """One action of the orphan scan (a return, retirement, adoption, terminate or report).

        Here it simply runs; the daemon's executor holds it as work in flight and refuses it
        once a stop was asked for, as it does every op (``orchestrator/daemon/guarded.py``).
        """
        yield

    def gate(self, provider: str, op_id: str, step: str) -> Epoch:
        """The fence's epoch, or ``LeaseLost`` (audited) naming the op, which stays resumable."""
        try:
            return self.fence.gate(provider)
        except LeaseLost as exc:
            self.audit("op-fenced", provider=provider, op=op_id, step=step, reason=str(exc))
            raise LeaseLost(f"{exc}; op {op_id} stopped before {step} (resumable: xceprov ops resume)") from None

    def commit(self, fact: Fact) -> None:
        """Commit one fact and audit it."""
        with self.serial:
            self.facts.commit(fact)
        self.audit(
            f"fact-{fact.kind}",
            provider=fact.provider,
            op=fact.op_id,
            key=fact.instance_key,
            instance=fact.instance_id,
            epoch=epoch_tag(fact.epoch),
            detail=fact.detail,
        )

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Commit ``facts`` as one batch (see ``FactLog.commit_many``) and audit the batch once,
        with its keys (and the instance ids it records) as the evidence."""
        if not facts:
            return
        with self.serial:
            self.facts.commit_many(facts)
        first = facts[0]
        # Named by its kinds, as a single fact's entry is ("fact-returning",
        # "fact-instanceCreated+expectedHost"), so one search finds both.
        kinds = list(dict.fromkeys(str(f.kind) for f in facts))
        others = sorted({f.op_id for f in facts} - {first.op_id})  # lost facts name their own ops
        self.audit(
            f"fact-{'+'.join(kinds)}",
            provider=first.provider,
            op=first.op_id,
            **({"other_ops": others} if others else {}),
            epoch=epoch_tag(first.epoch),
            facts=len(facts),
            keys=sorted({f.instance_key for f in facts if f.instance_key}),
            instances={f.instance_key: f.instance_id for f in facts if f.instance_id},
        )
