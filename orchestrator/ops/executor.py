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

A crash at any point leaves an op that :mod:`.resume` finds from the facts and completes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.controller.types import HostInfo
from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.messages import ApplyResult, PlanResult
from orchestrator.errors import FinalError, LeaseLost, UsageError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.hostnames import ADDRESS_REFUSED
from orchestrator.model.instances import InstanceSpec, instance_key, new_op_id
from orchestrator.model.progress import PlanDone, ProgressSink, no_progress, reported_phase
from orchestrator.ops.drain import Decommission, DrainSettings, settle_hosts
from orchestrator.ops.facts import FactLog
from orchestrator.ops.fence import Fence, epoch_tag
from orchestrator.ops.hostloss import LostInstance
from orchestrator.ops.hosts import HostControl
from orchestrator.ops.losses import LossObserver, observer_for
from orchestrator.ops.plancheck import check_create, check_delete, resource_keys
from orchestrator.ops.progress import ApplyTracker
from orchestrator.render.instances import RenderRequest, controller_context, render_op, render_settings, renderer_for
from orchestrator.workspace.audit import audit
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import instances_output, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

log = logging.getLogger(__name__)

# The instance resource of each module (docs/provider-modules.md): what an import addresses.
MODULE_INSTANCE_TYPES = {
    "xcesim": "xcesim_instance",
    "aws": "aws_instance",
    "openstack": "openstack_compute_instance_v2",
}

# The instances one shard of an op grows by, and the keys whose facts it records afterwards.
ShardWork = tuple[Mapping[str, InstanceSpec], Sequence[str]]


@dataclass(frozen=True)
class Created:
    """One instance an op created, as recorded at the controller."""

    key: str
    instance_id: str
    name: str
    address: str
    template: str
    join_deadline: float


@dataclass(frozen=True)
class Grown:
    """What growing one shard left: keys retired as lost on the way, the apply's outputs."""

    retired: set[str] = field(default_factory=set)
    outputs: Mapping[str, Any] | None = None


# provider, the instances just created → host name → outcome ("ok", "failed: ...").
Bootstrap = Callable[[str, Sequence[Created]], Mapping[str, str]]
LossFactory = Callable[[Engine, Path], LossObserver]


@dataclass
class CreateResult:
    """What a create op did."""

    op_id: str
    provider: str
    template: str
    created: list[Created] = field(default_factory=list)
    bootstrap: dict[str, str] = field(default_factory=dict)


@dataclass
class ReturnResult:
    """What a return op did (or, with ``dry_run``, would do)."""

    op_id: str
    provider: str
    keys: list[str]
    deleted: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    plan: PlanResult | None = None  # the first shard's plan (the only one when one shard holds the keys)
    drained: list[str] = field(default_factory=list)
    plans: list[PlanResult] = field(default_factory=list)  # one per shard holding chosen keys


def op_scope(provider: str, op_id: str) -> str:
    """How an op is named in progress reports: ``<provider> <op id>``."""
    return f"{provider} {op_id}"


def shard_index(shard: ProviderWorkdir) -> int:
    """The shard's index (0 for a plain working directory: it is shard 0)."""
    return int(getattr(shard, "index", 0))


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
        self.config = config
        self.root = toolkit_root
        self.engine = engine
        self.fence = fence
        self.facts = facts
        self.hosts = hosts
        self.bootstrap = bootstrap
        self.decommission = decommission
        self.losses = losses
        self.clock = clock
        self.sleep = sleep
        # Plans made and instances applied are reported here (the command line shows them).
        self.progress: ProgressSink | None = progress
        self._shards: dict[str, ProviderShards] = {}
        # Shards of one op run in threads: facts and audit entries are written one at a time.
        self._serial = threading.RLock()

    # -- small steps -----------------------------------------------------------------------------

    def shards(self, provider: str) -> ProviderShards:
        """The provider's shards (one object per provider, so its desired-set cache is shared)."""
        if provider not in self._shards:
            self._shards[provider] = ProviderShards(self.config, provider, self.root)
        return self._shards[provider]

    def workdir(self, provider: str) -> ProviderWorkdir:
        """The provider's shard 0 (its listing shard), built and initialised."""
        workdir = self.shards(provider).listing_shard()
        prepared_workdir(self.engine, workdir)
        return workdir

    def prepared(self, shard: ProviderWorkdir) -> ProviderWorkdir:
        """``shard`` built and initialised (a new shard is made on its first use)."""
        prepared_workdir(self.engine, shard)
        return shard

    def shard_list(self, provider: str) -> list[ProviderWorkdir]:
        """Every shard of the provider on disk, shard 0 first, each built and initialised."""
        self.workdir(provider)
        return [self.prepared(shard) for shard in self.shards(provider).all()]

    def provider_desired(self, provider: str) -> dict[str, InstanceSpec]:
        """The desired sets of every shard, merged (each read under its shard's lock)."""
        merged: dict[str, InstanceSpec] = {}
        for shard in self.shard_list(provider):
            with shard.lock():
                merged.update(self.desired(shard))
        return merged

    def provider_instances(self, provider: str) -> dict[str, dict[str, Any]]:
        """The instances of every shard's Terraform state, merged (key → id, name, address, tags)."""
        merged: dict[str, dict[str, Any]] = {}
        for shard in self.shard_list(provider):
            merged.update(self.state_instances(shard))
        return merged

    def run_shards(
        self, work: Iterable[tuple[ProviderWorkdir, Any]], step: Callable[[ProviderWorkdir, Any], Any]
    ) -> list[Any]:
        """``step(shard, item)`` for every pair, at most ``terraform.parallel_states`` at a time.

        Every shard runs to its end even when another fails (what one shard applied gets its
        facts); then the first failure is raised, a lost lease before any other, so the op stays
        open and resumable. The answers come back in the order of ``work``.
        """
        items = list(work)
        if len(items) <= 1:
            return [step(shard, item) for shard, item in items]
        workers = min(self.config.terraform.parallel_states, len(items))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xceprov-shard") as pool:
            futures = [pool.submit(step, shard, item) for shard, item in items]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise next((e for e in failed if isinstance(e, LeaseLost)), failed[0])
        return [f.result() for f in futures]

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry (the log is the operator's evidence of every step)."""
        with self._serial:
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
        with self._serial:
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
        with self._serial:
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

    def state_instances(
        self, workdir: ProviderWorkdir, applied: Mapping[str, Any] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The instances in the provider's Terraform state (key → id, name, address, tags).

        Read from the root's ``instances`` output, which Terraform writes at the end of a
        successful apply: after a failed one it may miss instances the apply did create
        (:meth:`state_keys` sees them, :meth:`sync_outputs` brings the output up to date).
        ``applied``: the outputs that the apply just made under the same lock reported in its
        own stream (:meth:`apply`); then no ``terraform output`` runs (one Terraform process,
        0.5 to 0.8 s per shard and op, less).
        """
        if applied is not None:
            return instances_output(dict(applied))
        return instances_output(self.engine.output(workdir.path))

    def state_keys(self, workdir: ProviderWorkdir) -> set[str]:
        """Every instance key some resource of the state is indexed by (outputs not needed)."""
        return resource_keys(self.engine.show_state(workdir.path))

    def sync_outputs(self, provider: str, workdir: ProviderWorkdir, op_id: str) -> dict[str, dict[str, Any]]:
        """Apply the desired set as it is, to write the outputs a failed apply left stale.

        The plan is checked to change no resource (a key the apply failed to create must have
        left the desired set first); only the outputs change. Returns the fresh instances.
        """
        with self.planned(workdir, self.desired(workdir), op_scope(provider, op_id)) as (plan, plan_file, _):
            check_delete(plan, set(), f"op {op_id} on provider {provider} (outputs only)")
            outputs = self.apply(provider, workdir, plan_file, op_id)
        return self.state_instances(workdir, outputs)

    def desired(self, workdir: ProviderWorkdir) -> dict[str, InstanceSpec]:
        """The desired set; refused when it is missing beside a non-empty state (never "delete all")."""
        current = workdir.desired.read()
        if not current and not workdir.desired_file.exists():
            held = self.state_instances(workdir)
            if held:
                raise FinalError(
                    f"{workdir.desired_file}: missing, but the Terraform state of provider {workdir.provider} "
                    f"holds {len(held)} instances; refusing to read that as 'delete everything' "
                    "(restore the file from a backup, or see docs/operations.md)"
                )
        return current

    def listable(self, workdir: ProviderWorkdir) -> None:
        """A provider never used has no desired set yet: write an empty one (what its first op
        would write first) so that its cloud can be listed. Never beside a state holding instances."""
        if workdir.desired_file.exists() or self.state_instances(workdir):
            return
        workdir.desired.write(workdir.variables({}, render_settings(self.config, workdir.provider)))

    @contextlib.contextmanager
    def planned(
        self, workdir: ProviderWorkdir, instances: Mapping[str, InstanceSpec], scope: str = ""
    ) -> Iterator[tuple[PlanResult, Path, dict[str, Any]]]:
        """A saved plan of ``instances`` as the whole desired set: (result, plan file, variables).

        The plan is reported as one unit of the ``plan`` phase of ``scope``.
        """
        variables = workdir.variables(instances, render_settings(self.config, workdir.provider))
        report = self.progress or no_progress
        with tempfile.TemporaryDirectory(prefix="xceprov-op-") as tmp:
            plan_file = Path(tmp) / "op.tfplan"
            with reported_phase(report, "plan", scope, 1), workdir.candidate_var_file(variables) as var_file:
                result = self.engine.plan(workdir.path, var_files=[var_file], out=plan_file)
                report(PlanDone(scope, result.summary.add, result.summary.change, result.summary.remove))
            yield result, plan_file, variables

    def apply(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        plan_file: Path,
        op_id: str,
        plan: PlanResult | None = None,
        names: Mapping[str, str] | None = None,
    ) -> Mapping[str, Any] | None:
        """Gate, then apply the checked plan; Terraform stops gracefully when the fence closes.

        With a progress sink and the checked ``plan``, each instance the apply creates or
        destroys is reported as it completes (``names``: instance key → host name). Returns the
        root outputs from the apply's own stream when they hold the ``instances`` output (None
        otherwise: the caller then asks ``terraform output``).
        """
        epoch = self.gate(provider, op_id, "apply")
        self.audit("op-apply", provider=provider, op=op_id, shard=shard_index(workdir), epoch=epoch_tag(epoch))
        tracker = None
        extra: dict[str, Any] = {}
        if self.progress is not None and plan is not None:
            tracker = ApplyTracker(self.progress, op_scope(provider, op_id), plan, names or {})
            # Only asked of the engine when someone listens: an engine without the hook still works.
            extra["on_event"] = tracker
        with contextlib.ExitStack() as stack:
            if tracker is not None and self.progress is not None:
                stack.enter_context(reported_phase(self.progress, "apply", op_scope(provider, op_id), tracker.total))
                stack.callback(tracker.finish)
            result = self._apply(provider, workdir, plan_file, op_id, extra)
        return result.outputs if isinstance(result.outputs.get("instances"), dict) else None

    def _apply(
        self, provider: str, workdir: ProviderWorkdir, plan_file: Path, op_id: str, extra: Mapping[str, Any]
    ) -> ApplyResult:
        try:
            result = self.engine.apply(
                workdir.path, plan_file=plan_file, should_stop=lambda: not self.fence.valid(provider), **extra
            )
        except Exception as exc:
            self.audit(
                "op-apply-failed",
                provider=provider,
                op=op_id,
                shard=shard_index(workdir),
                error=str(exc).splitlines()[0:1],
            )
            raise
        if result.interrupted:
            self.audit(
                "op-apply-interrupted",
                provider=provider,
                op=op_id,
                shard=shard_index(workdir),
                reason="the lease is no longer valid",
            )
            raise LeaseLost(
                f"provider {provider}: the lease lapsed or was revoked during the apply of op {op_id}; "
                "Terraform stopped after its calls in flight (resumable: xceprov ops resume)"
            )
        return result

    def drop_lost(
        self, provider: str, workdir: ProviderWorkdir, desired: dict[str, InstanceSpec], op_id: str
    ) -> dict[str, InstanceSpec]:
        """The host-loss path before a return's plan (the observer reads the cloud itself): ``lost``
        facts, keys out of the desired set, never re-created. A create observes with its own plan
        instead (:meth:`grow`)."""
        if not desired:
            return desired  # nothing managed yet: nothing can have been lost
        observer = self.losses(self.engine, workdir.path)
        return self.retire_lost(provider, workdir, desired, list(observer.observe()), op_id)

    def retire_lost(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        desired: dict[str, InstanceSpec],
        lost: Sequence[LostInstance],
        op_id: str,
    ) -> dict[str, InstanceSpec]:
        """The host-loss path for instances already judged lost (by this executor's observer, or
        by the orphan scan's reads): ``lost`` facts, keys out of the desired set (lock held)."""
        if not lost:
            return desired
        epoch = self.gate(provider, op_id, "lost facts")
        facts: list[Fact] = []
        for item in lost:
            spec = desired.get(item.instance_key)
            detail = json.dumps({"reason": item.reason, **item.evidence}, sort_keys=True, default=str)
            facts.append(
                Fact(
                    FactKind.LOST,
                    provider,
                    spec.tags.get(owner.OP_ID, op_id) if spec else op_id,
                    epoch,
                    instance_key=item.instance_key,
                    instance_id=item.instance_id,
                    template=spec.template if spec else "",
                    detail=detail[:4000],
                )
            )
        self.commit_many(facts)
        remaining = {k: v for k, v in desired.items() if k not in {i.instance_key for i in lost}}
        workdir.desired.write(workdir.variables(remaining, render_settings(self.config, provider)))
        self.audit("desired-lost-removed", provider=provider, keys=sorted(i.instance_key for i in lost))
        return remaining

    # -- create ----------------------------------------------------------------------------------

    def render(self, provider: str, template: str, count: int, op_id: str, epoch: Epoch) -> dict[str, InstanceSpec]:
        """The op's instances, tagged with its op id and the real epoch."""
        if template not in self.config.templates or provider not in self.config.templates[template].providers:
            raise UsageError(f"template {template!r} cannot run on provider {provider!r}")
        renderer = renderer_for(self.config, self.root / "templates")
        request = RenderRequest(provider, template, op_id, count, epoch=epoch_tag(epoch))
        return render_op(self.config, renderer, request, controller_context(self.config))

    def create(self, provider: str, template: str, count: int, op_id: str | None = None) -> CreateResult:
        """Create ``count`` hosts of ``template`` on ``provider`` as one op (see the module docstring)."""
        if count <= 0:
            raise UsageError(f"count must be at least 1, not {count}")
        op_id = op_id or new_op_id()
        shards = self.shards(provider)
        self.workdir(provider)
        # Held until every shard the op touches wrote its desired set (and applied): two
        # placements never read the same free room. Returns do not take it.
        with shards.placement_lock():
            epoch = self.gate(provider, op_id, "intent")
            specs = self.render(provider, template, count, op_id, epoch)
            placement = shards.place(op_id, sorted(specs))
            # New shards are built and initialised side by side; a missing desired set refuses
            # the op before its intent.
            self.run_shards(placement.items(), lambda shard, _keys: self.checked_desired(self.prepared(shard)))
            self.commit(Fact(FactKind.REQUEST_INTENT, provider, op_id, epoch, template=template, count=count))
            self.audit(
                "op-placed", provider=provider, op=op_id, shards={str(s.path): len(k) for s, k in placement.items()}
            )
            work = {shard: ({k: specs[k] for k in keys}, keys) for shard, keys in placement.items()}
            created = self.grow_shards(provider, op_id, template, work)
        return self.finish_create(provider, op_id, template, created)

    def checked_desired(self, shard: ProviderWorkdir) -> dict[str, InstanceSpec]:
        """The shard's desired set read under its lock (refused when missing beside a state)."""
        with shard.lock():
            return self.desired(shard)

    def grow_shards(
        self, provider: str, op_id: str, template: str, work: Mapping[ProviderWorkdir, ShardWork]
    ) -> list[Created]:
        """Per shard, under its lock: grow by its instances (when any), then record its keys' facts."""

        def one(shard: ProviderWorkdir, item: ShardWork) -> list[Created]:
            specs, keys = item
            with shard.lock():
                grown = self.grow(provider, shard, op_id, specs) if specs else Grown()
                # A key of this op found lost on the way (a resume of a half-applied op) has its
                # ``lost`` fact: it is accounted for, there is no instance to record.
                mine = sorted(k for k in keys if k not in grown.retired)
                return self.record_created(provider, shard, op_id, template, mine, grown.outputs) if mine else []

        made = self.run_shards(sorted(work.items(), key=lambda kv: shard_index(kv[0])), one)
        return sorted((c for part in made for c in part), key=lambda c: c.key)

    def grow(self, provider: str, workdir: ProviderWorkdir, op_id: str, specs: Mapping[str, InstanceSpec]) -> Grown:
        """Desired set + ``specs``, planned, checked, written, applied (the workdir lock is held);
        the keys found lost and retired on the way, and the outputs the apply reported.

        The op's own plan is the host-loss observation: its refresh reports every managed
        instance the cloud deleted as drift (``LossObserver.record``). Nothing deleted: that plan
        is checked and applied, the only Terraform plan before the apply. A deletion: the loss
        path (the observer reads the cloud again, ``lost`` facts, keys out of the desired set),
        then the op is planned again without the lost keys. A deletion not judged lost (the
        second read saw the instance, or the listing shows it alive) is forgiven; if the new plan
        still misses it, its re-create fails the check and the op is refused: never re-created
        silently, and the next op observes again.
        """
        desired = self.desired(workdir)
        scope = op_scope(provider, op_id)
        observer = self.losses(self.engine, workdir.path)
        with self.planned(workdir, {**desired, **specs}, scope) as (plan, plan_file, variables):
            # Nothing managed yet: nothing can have been lost (the op's plan observes nothing).
            deleted = sorted(observer.record(plan).deleted) if desired else []
            if not deleted:
                return Grown(set(), self.apply_grown(provider, workdir, op_id, specs, plan, plan_file, variables))
        self.audit("op-drift-deleted", provider=provider, op=op_id, shard=shard_index(workdir), keys=deleted)
        lost = list(observer.observe())
        desired = self.retire_lost(provider, workdir, desired, lost, op_id)
        retired = {item.instance_key for item in lost}
        # A lost key never comes back under the same key (it is the cloud's idempotency token).
        specs = {k: v for k, v in specs.items() if k not in retired}
        with self.planned(workdir, {**desired, **specs}, scope) as (plan, plan_file, variables):
            return Grown(retired, self.apply_grown(provider, workdir, op_id, specs, plan, plan_file, variables))

    def apply_grown(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        op_id: str,
        specs: Mapping[str, InstanceSpec],
        plan: PlanResult,
        plan_file: Path,
        variables: dict[str, Any],
    ) -> Mapping[str, Any] | None:
        """The create's plan checked (creates exactly ``specs``), the desired set written, applied;
        the outputs the apply reported (:meth:`apply`)."""
        check_create(plan, set(specs), f"op {op_id} on provider {provider}")
        workdir.desired.write(variables)  # the op's instances are durable before the cloud call
        self.audit(
            "op-desired",
            provider=provider,
            op=op_id,
            add=sorted(specs),
            planned={"add": plan.summary.add, "change": plan.summary.change, "remove": plan.summary.remove},
        )
        return self.apply(provider, workdir, plan_file, op_id, plan, {k: v.name for k, v in specs.items()})

    def record_created(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        op_id: str,
        template: str,
        keys: Sequence[str],
        applied: Mapping[str, Any] | None = None,
    ) -> list[Created]:
        """``instanceCreated`` and ``expectedHost`` for every key Terraform now holds (``applied``:
        the outputs of the apply just made, see :meth:`state_instances`)."""
        held = self.state_instances(workdir, applied)
        missing = [k for k in keys if k not in held]
        if missing:
            self.audit("op-incomplete", provider=provider, op=op_id, missing=missing)
            raise FinalError(
                f"op {op_id}: Terraform holds no instance for {', '.join(missing)} after the apply; "
                "the op stays open (xceprov ops resume)"
            )
        deadline_after = float(self.config.providers[provider].join_deadline)
        # One gate and one batch for the shard's keys (the link splits it into requests within
        # the protocol's limit): both facts of a key sit side by side, so a crash between two
        # requests leaves whole keys recorded or not, and resume records the rest.
        epoch = self.gate(provider, op_id, "instance facts")
        created: list[Created] = []
        facts: list[Fact] = []
        for key in keys:
            inst = held[key]
            if inst.get(ADDRESS_REFUSED):
                # Recorded unaddressed; the bootstrap gives the host its failed result.
                self.audit("address-refused", provider=provider, op=op_id, key=key, reason=inst[ADDRESS_REFUSED])
            item = Created(
                key,
                str(inst.get("id", "")),
                str(inst.get("name", "")),
                str(inst.get("address") or ""),
                str((inst.get("tags") or {}).get(owner.TEMPLATE, template)),
                self.clock() + deadline_after,
            )
            common: dict[str, Any] = {
                "instance_key": key,
                "instance_id": item.instance_id,
                "template": item.template,
                "host_name": item.name,
                "address": item.address,
            }
            facts.append(Fact(FactKind.INSTANCE_CREATED, provider, op_id, epoch, **common))
            facts.append(
                Fact(FactKind.EXPECTED_HOST, provider, op_id, epoch, join_deadline=item.join_deadline, **common)
            )
            created.append(item)
        self.commit_many(facts)
        return created

    def finish_create(self, provider: str, op_id: str, template: str, created: list[Created]) -> CreateResult:
        """Bootstrap (when wired) and the op's closing audit entry."""
        result = CreateResult(op_id, provider, template, created)
        self.audit(
            "op-created",
            provider=provider,
            op=op_id,
            template=template,
            instances={c.key: c.instance_id for c in created},
        )
        if self.bootstrap is not None and created:
            result.bootstrap = dict(self.bootstrap(provider, created))
            self.audit("op-bootstrap", provider=provider, op=op_id, hosts=result.bootstrap)
        return result

    # -- return ----------------------------------------------------------------------------------

    def return_instances(
        self,
        provider: str,
        keys: Sequence[str],
        *,
        drain: DrainSettings | None = None,
        dry_run: bool = False,
        max_delete: int | None = None,
        reason: str = "requested by the operator",
    ) -> ReturnResult:
        """Return the instances ``keys`` of ``provider`` as one op (see the module docstring)."""
        drain = drain or DrainSettings()
        op_id = new_op_id()
        chosen = sorted(set(keys))
        result = ReturnResult(op_id, provider, chosen, dry_run=dry_run)
        groups = self.group_by_shard(provider, chosen)
        what = f"return of {len(chosen)} instances on {provider}"

        def check(shard: ProviderWorkdir, shard_keys: list[str]) -> tuple[dict[str, str], PlanResult, list[str]]:
            with shard.lock():
                desired = self.desired(shard)
                remaining = {k: v for k, v in desired.items() if k not in shard_keys}
                with self.planned(shard, remaining, op_scope(provider, op_id)) as (plan, _plan_file, _variables):
                    deletes = check_delete(plan, set(shard_keys), what)
            return {k: desired[k].name for k in shard_keys}, plan, deletes

        for names, plan, deletes in self.run_shards(groups.items(), check):
            result.names.update(names)
            result.plans.append(plan)
            result.deleted.extend(deletes)
        # --max counts Terraform's deletions over every shard of the op.
        self._check_max(result.deleted, max_delete)
        result.plan = result.plans[0] if result.plans else None
        self.audit(
            "op-return-dry-run" if dry_run else "op-return",
            provider=provider,
            op=op_id,
            keys=chosen,
            deletes=result.deleted,
            reason=reason,
        )
        if dry_run:
            return result
        joined = settle_hosts(self, provider, op_id, chosen, drain)
        result.drained = sorted(joined) if drain.drain else []

        def one(shard: ProviderWorkdir, shard_keys: list[str]) -> None:
            with shard.lock():
                self.shrink(provider, shard, op_id, shard_keys, joined, max_delete)

        self.run_shards(groups.items(), one)
        return result

    def group_by_shard(self, provider: str, keys: Sequence[str]) -> dict[ProviderWorkdir, list[str]]:
        """``keys`` by the shard whose desired set holds them; a key no shard holds is refused."""
        wanted = set(keys)
        groups: dict[ProviderWorkdir, list[str]] = {}
        for shard in self.shard_list(provider):
            with shard.lock():
                held = [k for k in self.desired(shard) if k in wanted]  # refuses a missing desired set
            if held:
                groups[shard] = sorted(held)
        found = {k for held in groups.values() for k in held}
        unknown = [k for k in keys if k not in found]
        if unknown:
            raise UsageError(f"provider {provider}: {', '.join(unknown)}: not in the desired set")
        return groups

    @staticmethod
    def _check_max(deletes: Sequence[str], max_delete: int | None) -> None:
        if max_delete is not None and len(deletes) > max_delete:
            raise UsageError(
                f"the plan would delete {len(deletes)} instances, more than --max {max_delete}; raise --max to allow it"
            )

    def terminate_unmanaged(self, provider: str, object_id: str, tags: Mapping[str, str], reason: str) -> str:
        """Terminate a cloud object no Terraform state holds (an orphan the policy or an administrator
        chose to end), through the same fenced return path; the op id.

        The ``returning`` intent (with the lease epoch and the object's id) is committed before any
        cloud call. The object is imported into shard 0's state under a key of its own (the key is
        in the variables of that import only, never in the desired set), so the next plan, of the
        unchanged desired set, deletes exactly that key; :meth:`remove` checks, applies and records
        ``returned``. A crash leaves an open return op that resume completes.
        """
        if tags.get(owner.CLUSTER) != self.config.cluster or tags.get(owner.PROVIDER) != provider:
            raise UsageError(f"{object_id}: not tagged for cluster {self.config.cluster}, provider {provider}")
        templates = [n for n, t in sorted(self.config.templates.items()) if provider in t.providers]
        template = tags.get(owner.TEMPLATE, "")
        template = template if template in templates else (templates[0] if templates else "")
        if not template:
            raise UsageError(f"provider {provider}: no template runs there, so no instance can be imported")
        op_id = new_op_id()
        key = instance_key(op_id, 0)
        workdir = self.workdir(provider)
        epoch = self.gate(provider, op_id, "returning intent")
        detail = json.dumps({"unmanaged": True, "reason": reason})[:4000]
        self.commit(Fact(FactKind.RETURNING, provider, op_id, epoch, key, object_id, template, detail=detail))
        with workdir.lock():
            desired = self.desired(workdir)
            spec = self.render(provider, template, 1, op_id, epoch)[key]
            variables = workdir.variables({**desired, key: spec}, render_settings(self.config, provider))
            kind = MODULE_INSTANCE_TYPES.get(self.config.providers[provider].module, "")
            address = f'module.instances.{kind}.this["{key}"]'
            self.gate(provider, op_id, "import")
            self.audit("op-import", provider=provider, op=op_id, key=key, instance=object_id, reason=reason)
            with workdir.candidate_var_file(variables) as var_file:
                self.engine.import_resource(workdir.path, address, object_id, var_files=[var_file])
            self.remove(provider, workdir, op_id, [key], {**desired, key: spec})
        return op_id

    def shrink(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        op_id: str,
        keys: Sequence[str],
        joined: Mapping[str, HostInfo],
        max_delete: int | None,
    ) -> None:
        """``returning`` facts, desired set without ``keys``, planned, checked, applied, ``returned``."""
        desired = self.drop_lost(provider, workdir, self.desired(workdir), op_id)
        held = self.state_instances(workdir)
        epoch = self.gate(provider, op_id, "returning facts")
        returning: list[Fact] = []
        for key in keys:
            spec = desired.get(key)
            inst = held.get(key, {})
            returning.append(
                Fact(
                    FactKind.RETURNING,
                    provider,
                    op_id,
                    epoch,
                    instance_key=key,
                    instance_id=str(inst.get("id", "") or (joined[key].instance_id if key in joined else "")),
                    template=spec.template if spec else "",
                    host_name=spec.name if spec else "",
                )
            )
        self.commit_many(returning)  # every intent is durable before the desired set shrinks
        self.remove(provider, workdir, op_id, keys, desired, max_delete)

    def remove(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        op_id: str,
        keys: Sequence[str],
        desired: Mapping[str, InstanceSpec],
        max_delete: int | None = None,
    ) -> list[str]:
        """Desired set without ``keys``: planned, checked, written, applied; ``returned`` per key gone."""
        remaining = {k: v for k, v in desired.items() if k not in keys}
        with self.planned(workdir, remaining, op_scope(provider, op_id)) as (plan, plan_file, variables):
            deletes = check_delete(plan, set(keys), f"op {op_id} on provider {provider}")
            self._check_max(deletes, max_delete)
            workdir.desired.write(variables)
            self.audit("op-desired", provider=provider, op=op_id, remove=sorted(keys), deletes=deletes)
            outputs = None
            if deletes:
                names = {k: desired[k].name for k in keys if k in desired}
                outputs = self.apply(provider, workdir, plan_file, op_id, plan, names)
        held = self.state_instances(workdir, outputs)
        still = [k for k in keys if k in held]
        if still:
            raise FinalError(f"op {op_id}: {', '.join(still)} still in the Terraform state after the apply")
        epoch = self.gate(provider, op_id, "returned facts")
        self.commit_many(
            [
                Fact(
                    FactKind.RETURNED,
                    provider,
                    op_id,
                    epoch,
                    instance_key=key,
                    template=desired[key].template if key in desired else "",
                )
                for key in keys
            ]
        )
        self.audit("op-returned", provider=provider, op=op_id, keys=list(keys))
        return deletes
