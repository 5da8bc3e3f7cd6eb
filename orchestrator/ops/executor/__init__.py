"""The executor: every cloud mutation of the toolkit, one op at a time, fenced and audited.

One op = one intent. A create (:meth:`Executor.create`): gate → ``requestIntent`` fact →
the desired set grows by the op's keys (durable) → plan, checked (creates exactly those keys) →
gate → apply (Terraform is stopped gracefully when the fence closes) → ``instanceCreated`` and
``expectedHost`` facts per instance, committed as one batch per shard (``FactLog.commit_many``,
one audit entry per batch, named by its kinds and listing its keys) → bootstrap. A return
(:meth:`Executor.return_instances`): busy hosts refused or drained (close, wait up to
``drain_timeout``, then ``drain_policy``) → decommission → ``returning`` facts (one batch) →
the desired set shrinks → plan, checked (deletes exactly the chosen keys) → gate → apply →
``returned`` facts (one batch). The host-loss check (:mod:`.losses`) comes before each apply:
a create's own plan is its observation (its refresh shows what the cloud deleted, so a create
where nothing went missing runs one Terraform plan before its apply; a deletion runs the loss
path and plans again, :meth:`Executor.grow`); a return observes before its plan
(:meth:`Executor.drop_lost`). Every step is written to the audit log with its evidence;
docs/operations.md describes the lifecycle for operators.

Shards (docs/architecture.md, "Bursts that scale"): a provider's instances live in several
Terraform states of at most ``shard_size`` instances. A create places its keys
(``ProviderShards.place`` under the placement lock, held until every shard it touches has
written its desired set and applied); a return groups its keys by the shard holding them. The
shards of one op then run the steps above each under its own lock, at most
``terraform.parallel_states`` at a time, all with the same fence. Facts follow each shard's
apply; the op's outcome is complete only when every shard it spans applied, and a failed or
interrupted shard leaves the op open for resume.

A crash at any point leaves an op that :mod:`orchestrator.ops.resume` finds from the facts and
completes.

This package is the executor's public face: callers import from here only (the names in
``__all__``). Its rooms, one concern each, build on one another, each a class the next extends:
``shardaccess`` (the executor's parts, the shards, the parallel runner), ``recording`` (facts and
audit entries under the gate), ``tfsteps`` (Terraform on one shard), ``losspath`` (the host-loss
path), ``create`` and ``returnop`` (the two ops), ``unmanaged`` (terminating an object no state
holds). ``tests/unit/test_private_names.py`` keeps every module off another's private names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from orchestrator.model.facts import Epoch, Fact
from orchestrator.ops.executor.create import ShardWork
from orchestrator.ops.executor.results import Created, CreateResult, ReturnResult
from orchestrator.ops.executor.shardaccess import Bootstrap, LossFactory, op_scope, shard_index
from orchestrator.ops.executor.unmanaged import UnmanagedTermination
from orchestrator.ops.recorder import OpRecorder, Recorder


class Executor(UnmanagedTermination):
    """Carries out ops on the providers of one configuration (see the module docstring)."""

    # -- the recorder, for the callers that record a step of their own (drain, resume, orphans) --

    def gate(self, provider: str, op_id: str, step: str) -> Epoch:
        """The recorder's gate (:meth:`Recorder.gate`)."""
        return self.recorder.gate(provider, op_id, step)

    def audit(self, action: str, **details: Any) -> None:
        """The recorder's audit entry (:meth:`Recorder.audit`)."""
        self.recorder.audit(action, **details)

    def action(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The recorder's orphan action (:meth:`Recorder.action`)."""
        return self.recorder.action(name)

    def commit(self, fact: Fact) -> None:
        """The recorder's commit (:meth:`Recorder.commit`)."""
        self.recorder.commit(fact)

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """The recorder's batch commit (:meth:`Recorder.commit_many`)."""
        self.recorder.commit_many(facts)


__all__ = [
    "Bootstrap",
    "CreateResult",
    "Created",
    "Executor",
    "LossFactory",
    "OpRecorder",
    "Recorder",
    "ReturnResult",
    "ShardWork",
    "op_scope",
    "shard_index",
]
