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

A crash at any point leaves an op that :class:`ResumeOp` (:meth:`Executor.resume`) finds from the
facts and completes.

This package is the executor's public face: callers import from here only (the names in
``__all__``). Its rooms are collaborators, one concern each, handed to one another (none extends
another): ``parts`` (:class:`OpParts`: the configuration, clients and hooks every collaborator
is handed), ``shardset`` (the shards of each provider, the parallel runner), ``tfsteps``
(Terraform on one shard), ``losspath`` (the host-loss path), ``create`` and ``returnop`` (the
two ops), ``bake`` (a baked image: a builder created, baked, imaged and returned; an image
deleted; docs/images.md), ``startop`` (warm-pool instances started, docs/daemon.md "The warm
pool"), ``resumeop`` (open ops completed or abandoned), ``refused`` (a refused create closed),
``unmanaged`` (terminating an object no state holds); the recorder (gate, facts, audit entries)
is :mod:`orchestrator.ops.recorder`. :class:`Executor` builds them from one :class:`OpParts`
and offers the operations and reads, nothing else: a caller that records or reads beside the
ops takes the parts from whoever built the executor (:class:`Wired`), never from it.
``tests/unit/ops/test_executor_face.py`` holds the face and keeps every other module off the
collaborators; ``tests/unit/test_private_names.py`` keeps every module off another's private names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Unpack

from orchestrator.model.images import BakedImage, BuiltFrom
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.model.offerings import Placement
from orchestrator.ops.executor.bake import BakeOp, BakeResult, BakeRun, DeleteResult, bake_module
from orchestrator.ops.executor.create import CreateOp, ShardWork
from orchestrator.ops.executor.losspath import LossPath
from orchestrator.ops.executor.parts import Bootstrap, LossFactory, OpParts, OpWatch, op_scope, shard_index
from orchestrator.ops.executor.refused import RefusedClose, StillLaunched
from orchestrator.ops.executor.results import Created, CreateResult, ReturnResult
from orchestrator.ops.executor.resumeop import NO_STATE_YET, ProviderOps, Resolution, ResumeOp, Seen, tagged_objects
from orchestrator.ops.executor.returnop import ReturnOp, ReturnOptions
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.startop import StartOp
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.executor.unmanaged import UnmanagedTermination
from orchestrator.ops.hostloss import LostInstance
from orchestrator.ops.openops import OpenOp
from orchestrator.ops.recorder import OpRecorder, Recorder
from orchestrator.workspace.workdir import ProviderWorkdir


class Executor:
    """Carries out ops on the providers of one configuration (see the module docstring): its
    operations and reads are its whole surface; its collaborators are its own."""

    def __init__(self, parts: OpParts) -> None:
        self._parts = parts
        shardset = ShardSet(parts)
        terraform = TerraformSteps(parts, shardset)
        losspath = LossPath(parts)
        creates = CreateOp(parts, shardset, terraform, losspath)
        returns = ReturnOp(parts, shardset, terraform, losspath)
        self._shardset, self._terraform, self._losspath = shardset, terraform, losspath
        self._creates, self._returns = creates, returns
        self._bakes = BakeOp(parts, shardset, terraform, creates, returns)
        self._starts = StartOp(parts, shardset, terraform, losspath, (creates, returns))
        self._unmanaged = UnmanagedTermination(parts, shardset, terraform, creates, returns)
        self._resumes = ResumeOp(parts, shardset, terraform, creates, returns, bakes=self._bakes, starts=self._starts)
        self._refused = RefusedClose(parts, shardset, terraform, creates, returns)

    # -- the operations --------------------------------------------------------------------------

    def create(
        self,
        provider: str,
        template: str,
        count: int,
        op_id: str | None = None,
        *,
        pool: bool = False,
        placements: Sequence[Placement] | None = None,
    ) -> CreateResult:
        """Create ``count`` hosts of ``template`` on ``provider`` as one op (:meth:`CreateOp.create`);
        ``pool``: into the template's warm pool; ``placements``: the offerings of its keys, in key
        order (their counts sum to ``count``; none: the default offering). Watched by the parts'
        :class:`OpWatch` when there is one (its op id chosen first, to name it)."""
        watch = self._parts.watch
        if watch is None:
            return self._creates.create(provider, template, count, op_id, pool=pool, placements=placements)
        chosen = op_id or new_op_id(self._parts.clock())
        return watch.create(
            provider,
            template,
            count,
            chosen,
            lambda: self._creates.create(provider, template, count, chosen, pool=pool, placements=placements),
            pool=pool,
        )

    def start_pool(self, provider: str, template: str, keys: Sequence[str], op_id: str | None = None) -> CreateResult:
        """Start warm-pool instances ``keys`` as one op (:meth:`StartOp.start`), watched by the
        parts' :class:`OpWatch` when there is one (its op id chosen first, to name it)."""
        watch = self._parts.watch
        if watch is None:
            return self._starts.start(provider, template, keys, op_id)
        chosen = op_id or new_op_id(self._parts.clock())
        return watch.start_pool(
            provider, template, keys, chosen, lambda: self._starts.start(provider, template, keys, chosen)
        )

    def place(
        self,
        provider: str,
        template: str,
        count: int,
        op_id: str,
        detail: str = "",
        *,
        placements: Sequence[Placement] | None = None,
    ) -> list[str]:
        """An op's intent and desired sets without its apply; its keys (:meth:`CreateOp.place`)."""
        return self._creates.place(provider, template, count, op_id, detail, placements=placements)

    def return_instances(self, provider: str, keys: Sequence[str], **options: Unpack[ReturnOptions]) -> ReturnResult:
        """Return the instances ``keys`` of ``provider`` as one op (:meth:`ReturnOp.return_instances`),
        watched by the parts' :class:`OpWatch` when there is one."""
        watch = self._parts.watch
        if watch is None:
            return self._returns.return_instances(provider, keys, **options)
        reason = str(options.get("reason", ""))
        return watch.return_instances(
            provider, keys, reason, lambda: self._returns.return_instances(provider, keys, **options)
        )

    def bake(self, provider: str, template: str, op_id: str, built: BuiltFrom, run: BakeRun) -> BakeResult:
        """Bake an image of ``template`` on ``provider`` as one op (:meth:`BakeOp.bake`)."""
        return self._bakes.bake(provider, template, op_id, built, run)

    def delete_image(self, provider: str, image: BakedImage, op_id: str, dry_run: bool = False) -> DeleteResult:
        """Delete a baked image of this cluster as one op (:meth:`BakeOp.delete_image`)."""
        return self._bakes.delete_image(provider, image, op_id, dry_run)

    def retire(self, provider: str, shard: int, lost: Sequence[LostInstance], op_id: str) -> None:
        """Instances judged lost by another reader (the orphan scan) retired through the host-loss
        path in shard ``shard``, under its lock (:meth:`LossPath.retire_lost`)."""
        workdir = self._shardset.shards(provider).shard(shard)
        with workdir.lock():
            self._losspath.retire_lost(provider, workdir, self._terraform.desired(workdir), lost, op_id)

    def observe_losses(self, provider: str, keys: Sequence[str], op_id: str) -> list[str]:
        """The host-loss path now on the shards holding ``keys`` (the daemon's notice watch, once
        their reclaim time came: :meth:`LossPath.drop_lost`, each shard under its lock); the keys
        judged lost (a key already retired, or not lost yet, is not among them)."""
        shards = self._shardset.shards(provider)
        found: list[str] = []
        for index in sorted({i for i, held in shards.held().items() if held & set(keys)}):
            workdir = shards.shard(index)
            with workdir.lock():
                before = self._terraform.desired(workdir)
                if not set(keys) & set(before):
                    continue  # retired already (its state holds it until an apply: not again)
                after = self._losspath.drop_lost(provider, workdir, before, op_id)
                found.extend(sorted(set(before) - set(after)))
        return found

    def terminate_unmanaged(self, provider: str, object_id: str, tags: dict[str, str], reason: str) -> str:
        """Terminate a cloud object no state holds; the op id (:meth:`UnmanagedTermination.terminate_unmanaged`)."""
        return self._unmanaged.terminate_unmanaged(provider, object_id, tags, reason)

    def resume(self, provider: str) -> list[Resolution]:
        """Complete or abandon every open op of ``provider``, oldest first (:meth:`ResumeOp.resume_all`)."""
        return self._resumes.resume_all(provider)

    def resume_op(self, op: OpenOp, seen: Seen | None = None) -> Resolution:
        """Complete or abandon the open op ``op`` (:meth:`ResumeOp.resume`); ``seen``: what a
        :meth:`survey` just read of its provider (one op only)."""
        return self._resumes.resume(op, seen)

    def close_refused(self, op: OpenOp, reason: str, *, check_listing: bool = True) -> dict[str, Any]:
        """Close the create ``op`` the cloud refused; the evidence (:meth:`RefusedClose.close`)."""
        return self._refused.close(op, reason, check_listing=check_listing)

    # -- the reads (nothing of the cloud changes) --------------------------------------------------

    def survey(self, provider: str, wait: float | None = None) -> ProviderOps:
        """The provider's open ops and what no fact mentions (:meth:`ResumeOp.survey`)."""
        return self._resumes.survey(provider, wait)

    def shards(self, provider: str) -> list[ProviderWorkdir]:
        """Every shard of ``provider``, shard 0 first, each built and initialised
        (:meth:`ShardSet.shard_list`): the orphan scan reads them, the daemon warms them."""
        return self._shardset.shard_list(provider)

    def workdir(self, provider: str) -> ProviderWorkdir:
        """The listing shard of ``provider`` (shard 0), built and initialised (:meth:`ShardSet.workdir`)."""
        return self._shardset.workdir(provider)

    def desired(self, provider: str) -> dict[str, InstanceSpec]:
        """The desired sets of every shard of ``provider``, merged (:meth:`TerraformSteps.provider_desired`)."""
        return self._terraform.provider_desired(provider)

    def held(self, shard: ProviderWorkdir) -> dict[str, dict[str, Any]]:
        """The instances in ``shard``'s Terraform state (:meth:`TerraformSteps.state_instances`)."""
        return self._terraform.state_instances(shard)

    def kept_images(self, provider: str) -> list[BakedImage]:
        """The baked images shard 0's desired set keeps and its state holds (:meth:`BakeOp.kept_images`)."""
        return self._bakes.kept_images(provider)

    def listable(self, shard: ProviderWorkdir) -> None:
        """``shard`` made listable (an empty desired set where none was ever written; the caller
        holds its lock; :meth:`TerraformSteps.listable`)."""
        self._terraform.listable(shard)


class Wired(NamedTuple):
    """An executor and the parts it was built from, as whoever built them hands both on (a
    session of the command line, the daemon): a caller that records or reads beside the ops
    (facts, audit entries, the fence, the engine) takes them from ``parts``, never from the
    executor, whose surface is its operations and reads."""

    executor: Executor
    parts: OpParts

    @classmethod
    def of(cls, parts: OpParts) -> Wired:
        """An executor built from ``parts``, with them."""
        return cls(Executor(parts), parts)


OPERATIONS = (
    "create",
    "start_pool",
    "place",
    "return_instances",
    "bake",
    "delete_image",
    "retire",
    "observe_losses",
    "terminate_unmanaged",
    "resume",
    "resume_op",
    "close_refused",
)
READS = ("survey", "shards", "workdir", "desired", "held", "kept_images", "listable")


__all__ = [
    "NO_STATE_YET",
    "OPERATIONS",
    "READS",
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
    "OpWatch",
    "ProviderOps",
    "Recorder",
    "RefusedClose",
    "Resolution",
    "ResumeOp",
    "ReturnOp",
    "ReturnOptions",
    "ReturnResult",
    "Seen",
    "ShardSet",
    "ShardWork",
    "StartOp",
    "StillLaunched",
    "TerraformSteps",
    "UnmanagedTermination",
    "Wired",
    "bake_module",
    "op_scope",
    "shard_index",
    "tagged_objects",
]
