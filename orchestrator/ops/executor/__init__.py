"""The executor: every cloud mutation of the toolkit, one op at a time, fenced and audited.

One op = one intent. A create (:meth:`Executor.create`, :class:`CreateOp`): gate → ``requestIntent`` fact →
the desired set grows by the op's keys (durable) → plan, checked (creates exactly those keys) →
gate → apply (Terraform is stopped gracefully when the fence closes) → ``instanceCreated`` and
``expectedHost`` facts per instance, committed as one batch per shard (``FactLog.commit_many``,
one audit entry per batch, named by its kinds and listing its keys) → bootstrap. A return
(:meth:`Executor.return_instances`, :class:`ReturnOp`): busy hosts refused or drained (close, wait up to
``drain_timeout``, then ``drain_policy``) → decommission → ``returning`` facts (one batch) →
the desired set shrinks → plan, checked (deletes exactly the chosen keys) → gate → apply →
``returned`` facts (one batch). The host-loss check (:mod:`.losses`) comes before each apply:
a create's own plan is its observation (its refresh shows what the cloud deleted, so a create
where nothing went missing runs one Terraform plan before its apply; a deletion runs the loss
path and plans again, :meth:`CreateOp.grow`); a return observes before its plan
(:meth:`LossPath.drop_lost`). Every step is written to the audit log with its evidence;
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
``__all__``). Its rooms are collaborators, one concern each, handed to one another (none extends
another): ``parts`` (:class:`OpParts`: the configuration, clients and hooks every collaborator
is handed), ``shardset`` (the shards of each provider, the parallel runner), ``tfsteps``
(Terraform on one shard), ``losspath`` (the host-loss path), ``create`` and ``returnop`` (the
two ops), ``bake`` (a baked image: a builder created, baked, imaged and returned; an image
deleted; docs/images.md), ``startop`` (warm-pool instances started, docs/daemon.md "The warm
pool"), ``unmanaged`` (terminating an object no state holds); the recorder (gate, facts,
audit entries) is :mod:`orchestrator.ops.recorder`. :class:`Executor` builds them and offers
the operations; a caller that needs one step of its own (``ops resume``, the orphan scan)
reaches the collaborator that owns it (``executor.terraform``, ``executor.shardset``,
``executor.recorder``...). ``tests/unit/test_private_names.py`` keeps every module off
another's private names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Unpack

from orchestrator.clients.terraform.engine import Engine
from orchestrator.model.config import Config
from orchestrator.model.images import BakedImage, BuiltFrom
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor.bake import BakeOp, BakeResult, BakeRun, DeleteResult
from orchestrator.ops.executor.create import CreateOp, ShardWork
from orchestrator.ops.executor.losspath import LossPath
from orchestrator.ops.executor.parts import Bootstrap, LossFactory, OpParts, op_scope, shard_index
from orchestrator.ops.executor.results import Created, CreateResult, ReturnResult
from orchestrator.ops.executor.returnop import ReturnOp, ReturnOptions
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.startop import StartOp
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.executor.unmanaged import UnmanagedTermination
from orchestrator.ops.facts import FactLog
from orchestrator.ops.fence import Fence
from orchestrator.ops.hostloss import LostInstance
from orchestrator.ops.hosts import HostControl
from orchestrator.ops.losses import observer_for
from orchestrator.ops.recorder import OpRecorder, Recorder


class Executor:
    """Carries out ops on the providers of one configuration (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        toolkit_root: Path,
        engine: Engine,
        fence: Fence,
        facts: FactLog,
        hosts: HostControl,
        *,
        bootstrap: Bootstrap | None = None,
        decommission: Decommission | None = None,
        losses: LossFactory = observer_for,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        progress: ProgressSink | None = None,
    ) -> None:
        self.parts = OpParts(
            config, toolkit_root, engine, fence, facts, hosts, bootstrap, decommission, losses, clock, sleep, progress
        )
        self.shardset = ShardSet(self.parts)
        self.terraform = TerraformSteps(self.parts, self.shardset)
        self.losspath = LossPath(self.parts)
        self.creates = CreateOp(self.parts, self.shardset, self.terraform, self.losspath)
        self.returns = ReturnOp(self.parts, self.shardset, self.terraform, self.losspath)
        self.bakes = BakeOp(self.parts, self.shardset, self.terraform, self.creates, self.returns)
        self.starts = StartOp(self.parts, self.shardset, self.terraform, self.losspath, (self.creates, self.returns))
        self.unmanaged = UnmanagedTermination(self.parts, self.shardset, self.terraform, self.creates, self.returns)

    # -- the operations --------------------------------------------------------------------------

    def create(
        self, provider: str, template: str, count: int, op_id: str | None = None, *, pool: bool = False
    ) -> CreateResult:
        """Create ``count`` hosts of ``template`` on ``provider`` as one op (:meth:`CreateOp.create`);
        ``pool``: into the template's warm pool."""
        return self.creates.create(provider, template, count, op_id, pool=pool)

    def start_pool(self, provider: str, template: str, keys: Sequence[str], op_id: str | None = None) -> CreateResult:
        """Start warm-pool instances ``keys`` as one op (:meth:`StartOp.start`)."""
        return self.starts.start(provider, template, keys, op_id)

    def place(self, provider: str, template: str, count: int, op_id: str, detail: str = "") -> list[str]:
        """An op's intent and desired sets without its apply; its keys (:meth:`CreateOp.place`)."""
        return self.creates.place(provider, template, count, op_id, detail)

    def return_instances(self, provider: str, keys: Sequence[str], **options: Unpack[ReturnOptions]) -> ReturnResult:
        """Return the instances ``keys`` of ``provider`` as one op (:meth:`ReturnOp.return_instances`)."""
        return self.returns.return_instances(provider, keys, **options)

    def bake(self, provider: str, template: str, op_id: str, built: BuiltFrom, run: BakeRun) -> BakeResult:
        """Bake an image of ``template`` on ``provider`` as one op (:meth:`BakeOp.bake`)."""
        return self.bakes.bake(provider, template, op_id, built, run)

    def delete_image(self, provider: str, image: BakedImage, op_id: str, dry_run: bool = False) -> DeleteResult:
        """Delete a baked image of this cluster as one op (:meth:`BakeOp.delete_image`)."""
        return self.bakes.delete_image(provider, image, op_id, dry_run)

    def retire(self, provider: str, shard: int, lost: Sequence[LostInstance], op_id: str) -> None:
        """Instances judged lost by another reader (the orphan scan) retired through the host-loss
        path in shard ``shard``, under its lock (:meth:`LossPath.retire_lost`)."""
        workdir = self.shardset.shards(provider).shard(shard)
        with workdir.lock():
            self.losspath.retire_lost(provider, workdir, self.terraform.desired(workdir), lost, op_id)

    def terminate_unmanaged(self, provider: str, object_id: str, tags: dict[str, str], reason: str) -> str:
        """Terminate a cloud object no state holds; the op id (:meth:`UnmanagedTermination.terminate_unmanaged`)."""
        return self.unmanaged.terminate_unmanaged(provider, object_id, tags, reason)

    # -- the parts, shared by every collaborator (a reload sets a new configuration here) --------

    @property
    def config(self) -> Config:
        """The configuration every step reads."""
        return self.parts.config

    @config.setter
    def config(self, config: Config) -> None:
        self.parts.config = config

    @property
    def recorder(self) -> OpRecorder:
        """The gate, the facts and the audit entries of every step."""
        return self.parts.recorder

    @recorder.setter
    def recorder(self, recorder: OpRecorder) -> None:
        self.parts.recorder = recorder

    @property
    def engine(self) -> Engine:
        """The Terraform engine."""
        return self.parts.engine

    @property
    def fence(self) -> Fence:
        """The fence every mutation passes."""
        return self.parts.fence

    @property
    def facts(self) -> FactLog:
        """Where facts are committed."""
        return self.parts.facts

    @property
    def hosts(self) -> HostControl:
        """Drain and decommission at the controller."""
        return self.parts.hosts

    @hosts.setter
    def hosts(self, hosts: HostControl) -> None:
        self.parts.hosts = hosts

    @property
    def clock(self) -> Callable[[], float]:
        """The wall clock of join deadlines."""
        return self.parts.clock

    @property
    def sleep(self) -> Callable[[float], None]:
        """A drain's wait."""
        return self.parts.sleep

    @sleep.setter
    def sleep(self, sleep: Callable[[float], None]) -> None:
        self.parts.sleep = sleep

    @property
    def decommission(self) -> Decommission | None:
        """The decommission play, when wired."""
        return self.parts.decommission


__all__ = [
    "BakeOp",
    "BakeResult",
    "BakeRun",
    "Bootstrap",
    "CreateOp",
    "CreateResult",
    "Created",
    "DeleteResult",
    "Executor",
    "LossFactory",
    "LossPath",
    "OpParts",
    "OpRecorder",
    "Recorder",
    "ReturnOp",
    "ReturnOptions",
    "ReturnResult",
    "ShardSet",
    "ShardWork",
    "StartOp",
    "TerraformSteps",
    "UnmanagedTermination",
    "op_scope",
    "shard_index",
]
