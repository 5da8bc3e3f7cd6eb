"""The create op: intent, placement on shards, plan, checked apply, instance facts, bootstrap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import FinalError, UsageError
from orchestrator.model import tags as owner
from orchestrator.model.costs import launch_detail
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.hostnames import ADDRESS_REFUSED
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.model.offerings import Offering, Placement, placement_detail, placements_of
from orchestrator.model.pool import FILL_DETAIL, in_pool, pooled
from orchestrator.ops.executor.losspath import LossPath
from orchestrator.ops.executor.parts import OpParts, op_scope, shard_index
from orchestrator.ops.executor.results import Created, CreateResult
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.fence import epoch_tag
from orchestrator.ops.firstboot import mint_tokens
from orchestrator.ops.images import resolve_baked
from orchestrator.ops.plancheck import check_create
from orchestrator.ops.refusal import refusals
from orchestrator.ops.steps import desired_variables, render_instances
from orchestrator.render.instances import RenderRequest
from orchestrator.workspace.workdir import ProviderWorkdir

# The instances one shard of an op grows by, and the keys whose facts it records afterwards.
ShardWork = tuple[Mapping[str, InstanceSpec], Sequence[str]]


@dataclass(frozen=True)
class Grown:
    """What growing one shard left: keys retired as lost on the way, the apply's outputs."""

    retired: set[str] = field(default_factory=set)
    outputs: Mapping[str, Any] | None = None
    # Instance key -> join deadline of the first-boot hosts grown (their tokens' expiry).
    deadlines: Mapping[str, float] = field(default_factory=dict)


class CreateOp:
    """Creates hosts of a template on a provider as one op (see :mod:`orchestrator.ops.executor`)."""

    def __init__(self, parts: OpParts, shardset: ShardSet, terraform: TerraformSteps, losspath: LossPath) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.losspath = losspath

    def render(
        self,
        provider: str,
        template: str,
        count: int,
        op_id: str,
        epoch: Epoch,
        pool: bool = False,
        *,
        resolve: bool = True,
        placements: Sequence[Placement] | None = None,
    ) -> dict[str, InstanceSpec]:
        """The op's instances, tagged with its op id and the real epoch (the shared step the plan
        preview renders with, :func:`orchestrator.ops.steps.render_instances`); ``pool``: as
        warm-pool instances (launched stopped, tagged ``xce:pool=warm``); ``placements``: each
        key's offering, in key order (none: the provider's default offering)."""
        request = RenderRequest(
            provider,
            template,
            op_id,
            count,
            epoch=epoch_tag(epoch),
            placements=placements,
            offerings=self.selected(provider, template),
        )
        # ``bake:newest`` becomes the newest bake's id first (docs/images.md); ``resolve`` False
        # for a caller holding shard 0's lock whose image is never launched (an import).
        config = self.parts.config
        if resolve:
            config = resolve_baked(config, self.parts.engine, self.shardset.workdir(provider), template)
        specs = render_instances(config, self.parts.root, request)
        return {k: pooled(v) for k, v in specs.items()} if pool else specs

    def selected(self, provider: str, template: str) -> dict[str, Offering]:
        """The offerings a ``select:`` template picked on ``provider``, by name (none for a
        template that lists its offerings: the renderer knows those)."""
        side = self.parts.config.templates[template].providers.get(provider)
        if side is None or side.select is None or self.parts.selected is None:
            return {}
        return {o.name: o for o in self.parts.selected().get((template, provider), ())}

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
        """Create ``count`` hosts of ``template`` on ``provider`` as one op (see the module docstring);
        ``pool``: into the template's warm pool (stopped, no ``expectedHost``, no bootstrap, the
        default offering); ``placements``: the offerings of its keys, in key order, named in its
        intent's ``detail`` (none: the default offering)."""
        if count <= 0:
            raise UsageError(f"count must be at least 1, not {count}")
        op_id = op_id or new_op_id(self.parts.clock())
        shards = self.shardset.shards(provider)
        # Held until every shard the op touches wrote its desired set (and applied): two
        # placements never read the same free room. Returns do not take it. A Terraform
        # failure on the way (an init too) leaves as its typed refusal.
        with refusals(self.parts.config.providers[provider].module):
            self.shardset.workdir(provider)
            with shards.placement_lock():
                work = self.intend(provider, template, count, op_id, intent_detail(count, pool, placements))
                created = self.grow_shards(provider, op_id, template, work)
        return self.finish_create(provider, op_id, template, created)

    def intend(
        self, provider: str, template: str, count: int, op_id: str, detail: str = ""
    ) -> dict[ProviderWorkdir, ShardWork]:
        """The op's instances rendered and placed on shards, and its ``requestIntent`` committed
        (``detail`` on the fact; :data:`~orchestrator.model.pool.FILL_DETAIL` renders pool
        instances, :func:`~orchestrator.model.offerings.placement_detail` places keys on
        offerings: the detail is what a resume reads back); the placement lock is held. What
        each shard grows by."""
        epoch = self.parts.recorder.gate(provider, op_id, "intent")
        placements = placements_of(detail)
        specs = self.render(provider, template, count, op_id, epoch, pool=detail == FILL_DETAIL, placements=placements)
        placement = self.shardset.shards(provider).place(op_id, sorted(specs))
        # New shards are built and initialised side by side; a missing desired set refuses
        # the op before its intent.
        self.shardset.run_shards(
            placement.items(), lambda shard, _keys: self.checked_desired(self.shardset.prepared(shard))
        )
        self.parts.recorder.commit(
            Fact(FactKind.REQUEST_INTENT, provider, op_id, epoch, template=template, count=count, detail=detail)
        )
        self.parts.recorder.audit(
            "op-placed", provider=provider, op=op_id, shards={str(s.path): len(k) for s, k in placement.items()}
        )
        return {shard: ({k: specs[k] for k in keys}, keys) for shard, keys in placement.items()}

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
        """An op's intent without its apply: ``requestIntent`` committed and the desired sets
        grown by its instances, durably, and nothing asked of the cloud; the op's keys
        (``placements``: its keys' offerings, written as the intent's detail: ``detail`` is then empty).

        The op is then open with its keys desired and not in any state, which every resume
        (:class:`~orchestrator.ops.executor.resumeop.ResumeOp`: ``xceprov ops resume``, the daemon's loop, the provider
        contract's worker) completes by planning, checking and applying the desired set; no
        path abandons it, since its desired set was written under the same fence as its intent.
        """
        if count <= 0:
            raise UsageError(f"count must be at least 1, not {count}")
        shards = self.shardset.shards(provider)
        self.shardset.workdir(provider)
        if placements:
            if detail not in ("", FILL_DETAIL):
                raise UsageError(f"op {op_id}: an intent's detail is its placements or {detail!r}, not both")
            detail = intent_detail(count, detail == FILL_DETAIL, placements)
        with shards.placement_lock():
            work = self.intend(provider, template, count, op_id, detail)

            def write(shard: ProviderWorkdir, item: ShardWork) -> None:
                specs, _keys = item
                with shard.lock():
                    desired = self.terraform.desired(shard)
                    self.parts.recorder.gate(provider, op_id, "desired set")
                    shard.desired.write(desired_variables(self.parts.config, shard, {**desired, **specs}))

            self.shardset.run_shards(work.items(), write)
        keys = sorted(k for _specs, keys in work.values() for k in keys)
        self.parts.recorder.audit(
            "op-desired", provider=provider, op=op_id, add=keys, planned="by the resume that applies it"
        )
        return keys

    def checked_desired(self, shard: ProviderWorkdir) -> dict[str, InstanceSpec]:
        """The shard's desired set read under its lock (refused when missing beside a state)."""
        with shard.lock():
            return self.terraform.desired(shard)

    def grow_shards(
        self, provider: str, op_id: str, template: str, work: Mapping[ProviderWorkdir, ShardWork]
    ) -> list[Created]:
        """Per shard, under its lock: grow by its instances (when any), then record its keys' facts."""

        def one(shard: ProviderWorkdir, item: ShardWork) -> list[Created]:
            specs, keys = item
            with shard.lock():
                # Terraform's failure becomes its typed refusal here, by the module's rules.
                with refusals(self.parts.config.providers[provider].module):
                    grown = self.grow(provider, shard, op_id, specs) if specs else Grown()
                # A key of this op found lost on the way (a resume of a half-applied op) has its
                # ``lost`` fact: it is accounted for, there is no instance to record.
                mine = sorted(k for k in keys if k not in grown.retired)
                if not mine:
                    return []
                return self.record_created(provider, shard, op_id, template, mine, grown.outputs, grown.deadlines)

        made = self.shardset.run_shards(sorted(work.items(), key=lambda kv: shard_index(kv[0])), one)
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
        desired = self.terraform.desired(workdir)
        scope = op_scope(provider, op_id)
        observer = self.parts.losses(self.parts.engine, workdir)
        # First-boot hosts: their tokens go to the plan and its apply, never to the desired set.
        tokens = mint_tokens(self.parts.config, provider, specs, self.parts.clock())
        with self.terraform.planned(workdir, {**desired, **specs}, scope, tokens=tokens) as (
            plan,
            plan_file,
            variables,
        ):
            # Nothing managed yet: nothing can have been lost (the op's plan observes nothing).
            deleted = sorted(observer.record(plan).deleted) if desired else []
            if not deleted:
                outputs = self.apply_grown(provider, workdir, op_id, specs, plan, plan_file, variables)
                return Grown(set(), outputs, tokens.deadlines())
        self.parts.recorder.audit(
            "op-drift-deleted", provider=provider, op=op_id, shard=shard_index(workdir), keys=deleted
        )
        lost = list(observer.observe())
        desired = self.losspath.retire_lost(provider, workdir, desired, lost, op_id)
        retired = {item.instance_key for item in lost}
        # A lost key never comes back under the same key (it is the cloud's idempotency token).
        specs = {k: v for k, v in specs.items() if k not in retired}
        with self.terraform.planned(workdir, {**desired, **specs}, scope, tokens=tokens) as (
            plan,
            plan_file,
            variables,
        ):
            outputs = self.apply_grown(provider, workdir, op_id, specs, plan, plan_file, variables)
            return Grown(retired, outputs, tokens.deadlines())

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
        the outputs the apply reported (:meth:`TerraformSteps.apply`)."""
        check_create(plan, set(specs), f"op {op_id} on provider {provider}")
        workdir.desired.write(variables)  # the op's instances are durable before the cloud call
        self.parts.recorder.audit(
            "op-desired",
            provider=provider,
            op=op_id,
            add=sorted(specs),
            planned={"add": plan.summary.add, "change": plan.summary.change, "remove": plan.summary.remove},
        )
        return self.terraform.apply(provider, workdir, plan_file, op_id, plan, {k: v.name for k, v in specs.items()})

    def record_created(
        self,
        provider: str,
        workdir: ProviderWorkdir,
        op_id: str,
        template: str,
        keys: Sequence[str],
        applied: Mapping[str, Any] | None = None,
        deadlines: Mapping[str, float] | None = None,
    ) -> list[Created]:
        """``instanceCreated`` and ``expectedHost`` for every key Terraform now holds (``applied``:
        the outputs of the apply just made, see :meth:`TerraformSteps.state_instances`).

        A host's join deadline is the provider's ``join_deadline`` from now, or, for a first-boot
        host, the one its token expires at (``deadlines``, fixed when the op planned it). A
        warm-pool instance (its state's tags say ``xce:pool=warm``, so a resume reads the same)
        gets ``instanceCreated`` only: it is not expected to join while stopped, so no join
        deadline runs for it; the start op that takes it commits its ``expectedHost``."""
        held = self.terraform.state_instances(workdir, applied)
        missing = [k for k in keys if k not in held]
        if missing:
            self.parts.recorder.audit("op-incomplete", provider=provider, op=op_id, missing=missing)
            raise FinalError(
                f"op {op_id}: Terraform holds no instance for {', '.join(missing)} after the apply; "
                "the op stays open (xceprov ops resume)"
            )
        deadline_after = float(self.parts.config.providers[provider].join_deadline)
        # One gate and one batch for the shard's keys (the link splits it into requests within
        # the protocol's limit): both facts of a key sit side by side, so a crash between two
        # requests leaves whole keys recorded or not, and resume records the rest.
        epoch = self.parts.recorder.gate(provider, op_id, "instance facts")
        created: list[Created] = []
        facts: list[Fact] = []
        for key in keys:
            deadline = (deadlines or {}).get(key) or self.parts.clock() + deadline_after
            item = self.held_host(provider, op_id, key, held[key], template, deadline)
            launched = launch_detail(held[key])  # the cloud's launch time: the cost ledger's start
            facts.append(Fact(FactKind.INSTANCE_CREATED, provider, op_id, epoch, detail=launched, **host_fields(item)))
            if not item.pool:
                facts.append(expected_host(provider, op_id, epoch, item))
            created.append(item)
        self.parts.recorder.commit_many(facts)
        return created

    def held_host(
        self, provider: str, op_id: str, key: str, inst: Mapping[str, Any], template: str, deadline: float
    ) -> Created:
        """What the state holds of ``key`` as a host with join deadline ``deadline`` (a refused
        address audited: recorded unaddressed, the bootstrap gives the host its failed result)."""
        if inst.get(ADDRESS_REFUSED):
            self.parts.recorder.audit(
                "address-refused", provider=provider, op=op_id, key=key, reason=inst[ADDRESS_REFUSED]
            )
        return Created(
            key,
            str(inst.get("id", "")),
            str(inst.get("name", "")),
            str(inst.get("address") or ""),
            str((inst.get("tags") or {}).get(owner.TEMPLATE, template)),
            deadline,
            pool=in_pool(inst.get("tags")),
        )

    def complete(
        self, provider: str, op_id: str, template: str, work: Mapping[ProviderWorkdir, ShardWork]
    ) -> CreateResult:
        """An open create op carried to its end (``ops resume``): each shard grown by its unapplied
        instances, the facts of its keys recorded, then the bootstrap and the closing entry."""
        created = self.grow_shards(provider, op_id, template, work) if work else []
        return self.finish_create(provider, op_id, template, created)

    def finish_create(
        self, provider: str, op_id: str, template: str, created: list[Created], closing: str = "op-created"
    ) -> CreateResult:
        """Bootstrap (when wired) and the op's closing audit entry (``closing``: a warm-pool start
        closes with ``op-started`` and its hosts take this very step, as new ones do)."""
        result = CreateResult(op_id, provider, template, created)
        self.parts.recorder.audit(
            closing,
            provider=provider,
            op=op_id,
            template=template,
            instances={c.key: c.instance_id for c in created},
        )
        hosts = [c for c in created if not c.pool]  # pool instances are bootstrapped once started
        if self.parts.bootstrap is not None and hosts:
            result.bootstrap = dict(self.parts.bootstrap(provider, hosts))
            self.parts.recorder.audit("op-bootstrap", provider=provider, op=op_id, hosts=result.bootstrap)
        return result


def intent_detail(count: int, pool: bool, placements: Sequence[Placement] | None) -> str:
    """A create intent's ``detail``: a warm-pool fill's mark (its keys on the default offering),
    else the placements of its keys (none given: empty, every key on the default offering)."""
    if pool:
        return FILL_DETAIL
    if not placements:
        return ""
    if sum(p.count for p in placements) != count:
        raise UsageError(
            f"placements {_said(placements)} place {sum(p.count for p in placements)} instances, not {count}"
        )
    try:
        return placement_detail(placements)
    except ValueError as exc:  # a bad name, or more offerings than one intent's detail holds
        raise UsageError(str(exc)) from None


def _said(placements: Sequence[Placement]) -> str:
    return ", ".join(f"{p.offering}={p.count}" for p in placements)


def host_fields(item: Created) -> dict[str, Any]:
    """The fields an instance's facts carry about it."""
    return {
        "instance_key": item.key,
        "instance_id": item.instance_id,
        "template": item.template,
        "host_name": item.name,
        "address": item.address,
    }


def expected_host(provider: str, op_id: str, epoch: Epoch, item: Created) -> Fact:
    """The ``expectedHost`` fact of ``item`` (of op ``op_id``: a create, or a warm-pool start)."""
    return Fact(FactKind.EXPECTED_HOST, provider, op_id, epoch, join_deadline=item.join_deadline, **host_fields(item))
