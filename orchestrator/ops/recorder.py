"""The recorder: an op's gate, its facts and its audit entries, one entry at a time across the shards of an op.

A collaborator every step of an op is handed (not a base class): :class:`Recorder` is the
plain one; a caller that must watch or refuse an op's steps (the daemon's stop guard,
``orchestrator/daemon/guarded.py``) hands the executor a wrapper of its own that keeps the
:class:`OpRecorder` surface and delegates to a :class:`Recorder`. Ops never call above
themselves: they call the object they were given.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from orchestrator.errors import LeaseLost
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch, Fact
from orchestrator.ops.facts import FactLog
from orchestrator.ops.fence import Fence, epoch_tag
from orchestrator.workspace.audit import audit


class OpRecorder(Protocol):
    """What an op's steps ask of their recorder."""

    def gate(self, provider: str, op_id: str, step: str) -> Epoch:
        """The fence's epoch before ``step`` of ``op_id``, or ``LeaseLost``."""
        ...

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry."""
        ...

    def action(self, name: str) -> contextlib.AbstractContextManager[None]:
        """One action of the orphan scan, held for its duration."""
        ...

    def commit(self, fact: Fact) -> None:
        """One fact committed and audited."""
        ...

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Facts committed as one batch and audited once."""
        ...


class RecordedParts(Protocol):
    """Where a recorder finds the configuration, the fence and the fact log, read at each step
    (the daemon's reload sets a new configuration on them): the executor's parts."""

    config: Config
    fence: Fence
    facts: FactLog


class Recorder:
    """The gate, the facts and the audit entries of the executor's steps."""

    def __init__(self, parts: RecordedParts) -> None:
        self.parts = parts
        # Shards of one op run in threads: facts and audit entries are written one at a time.
        self.serial = threading.RLock()

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry (the log is the operator's evidence of every step)."""
        with self.serial:
            audit(self.parts.config.state_dir, action, **details)

    @contextlib.contextmanager
    def action(self, name: str) -> Iterator[None]:
        """One action of the orphan scan (a return, retirement, adoption, terminate or report).

        Here it simply runs; the daemon's stop guard holds it as work in flight and refuses it
        once a stop was asked for, as it does every op (``orchestrator/daemon/guarded.py``).
        """
        yield

    def gate(self, provider: str, op_id: str, step: str) -> Epoch:
        """The fence's epoch, or ``LeaseLost`` (audited) naming the op, which stays resumable."""
        try:
            return self.parts.fence.gate(provider)
        except LeaseLost as exc:
            self.audit("op-fenced", provider=provider, op=op_id, step=step, reason=str(exc))
            raise LeaseLost(f"{exc}; op {op_id} stopped before {step} (resumable: xceprov ops resume)") from None

    def commit(self, fact: Fact) -> None:
        """Commit one fact and audit it."""
        with self.serial:
            self.parts.facts.commit(fact)
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
            self.parts.facts.commit_many(facts)
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
