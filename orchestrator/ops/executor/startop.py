"""The start op: warm-pool instances taken by demand, started in place, expected, bootstrapped.

Fenced and intent-first like every op (docs/operations.md, "The warm pool"): gate →
``requestIntent`` naming the keys (``count`` 0, ``detail`` from
:func:`orchestrator.model.pool.start_detail`) → per shard, under its lock: the desired entries
become :func:`~orchestrator.model.pool.started` (``power_state`` running, the ``xce:pool`` tag
removed), planned, checked (updates exactly those keys in place), written, gate, applied → one
``expectedHost`` per started key, of this op, with a join deadline from now (the host was
stopped until this moment) → the same bootstrap a new host goes through (the push play, or
for first-boot templates whatever the bootstrap hook does for a new host). The op is open
until each of its keys has its ``expectedHost`` (or is gone); resume finishes it
(:meth:`StartOp.complete`), and a second apply of the same desired entries changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.errors import FinalError, UsageError
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.model.pool import MAX_START_KEYS, start_detail, started
from orchestrator.ops.executor.create import CreateOp, expected_host
from orchestrator.ops.executor.losspath import LossPath
from orchestrator.ops.executor.parts import OpParts, op_scope, shard_index
from orchestrator.ops.executor.results import Created, CreateResult
from orchestrator.ops.executor.returnop import ReturnOp
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.firstboot import Tokens, mint_tokens
from orchestrator.ops.plancheck import check_start
from orchestrator.ops.refusal import refusals
from orchestrator.workspace.workdir import ProviderWorkdir


class StartOp:
    """Starts warm-pool instances of a provider as one op (see the module docstring)."""

    def __init__(
        self,
        parts: OpParts,
        shardset: ShardSet,
        terraform: TerraformSteps,
        losspath: LossPath,
        ops: tuple[CreateOp, ReturnOp],
    ) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.losspath = losspath
        self.creates, self.returns = ops

    def start(self, provider: str, template: str, keys: Sequence[str], op_id: str | None = None) -> CreateResult:
        """Start the pool instances ``keys`` of ``template`` on ``provider`` as one op."""
        chosen = sorted(set(keys))
        if not chosen or len(chosen) > MAX_START_KEYS:
            raise UsageError(f"a start op takes 1 to {MAX_START_KEYS} pool instances, not {len(chosen)}")
        op_id = op_id or new_op_id(self.parts.clock())
        self.shardset.workdir(provider)
        groups = self.returns.group_by_shard(provider, chosen)  # a key no shard holds: refused before the intent
        epoch = self.parts.recorder.gate(provider, op_id, "intent")
        self.parts.recorder.commit(
            Fact(FactKind.REQUEST_INTENT, provider, op_id, epoch, template=template, detail=start_detail(chosen))
        )
        self.parts.recorder.audit("op-start", provider=provider, op=op_id, template=template, keys=chosen)
        return self.complete(provider, op_id, template, groups)

    def complete(
        self, provider: str, op_id: str, template: str, groups: Mapping[ProviderWorkdir, Sequence[str]]
    ) -> CreateResult:
        """Every shard's keys started and expected, then the bootstrap (also ``ops resume``'s way)."""

        def one(shard: ProviderWorkdir, keys: Sequence[str]) -> list[Created]:
            with shard.lock():
                with refusals(self.parts.config.providers[provider].module):
                    outputs, retired, tokens = self.power_on(provider, shard, op_id, keys)
                mine = [k for k in keys if k not in retired]
                return self.record_started(provider, shard, op_id, template, mine, outputs, tokens) if mine else []

        made = self.shardset.run_shards(sorted(groups.items(), key=lambda kv: shard_index(kv[0])), one)
        created = sorted((c for part in made for c in part), key=lambda c: c.key)
        # The very step a new host goes through: the closing entry, then the bootstrap hook.
        return self.creates.finish_create(provider, op_id, template, created, closing="op-started")

    def power_on(
        self, provider: str, shard: ProviderWorkdir, op_id: str, keys: Sequence[str]
    ) -> tuple[Mapping[str, Any] | None, set[str], Tokens]:
        """The keys' desired entries started, planned, checked, written and applied (lock held);
        the apply's outputs, the keys found lost on the way (retired, never started), and the
        join tokens of the first-boot keys started.

        A first-boot pool instance gets a fresh token here, minted when the start is planned and
        expiring at the join deadline the start gives it (the one of its launch may have expired
        while it waited stopped): the plan and the apply hand it to the provider (the ephemeral
        ``join_tokens``), which writes it into the copy of the user data the host boots with as it
        starts it; the host's per-boot hook joins with it.

        The plan is the host-loss observation, as a create's (:meth:`CreateOp.grow`): a pool
        instance the cloud deleted while stopped is recorded ``lost`` and leaves the desired set.
        """
        desired = self.terraform.desired(shard)
        missing = [k for k in keys if k not in desired]
        if missing:
            raise FinalError(f"op {op_id}: {', '.join(missing)} not in the desired set of provider {provider}")
        observer = self.parts.losses(self.parts.engine, shard)
        scope = op_scope(provider, op_id)
        tokens = mint_tokens(self.parts.config, provider, {k: started(desired[k]) for k in keys}, self.parts.clock())
        with self.terraform.planned(shard, self.wanted(desired, keys), scope, tokens=tokens) as planned:
            deleted = sorted(observer.record(planned[0]).deleted)
            if not deleted:
                return self.apply_started(provider, shard, op_id, keys, desired, planned), set(), tokens
        self.parts.recorder.audit(
            "op-drift-deleted", provider=provider, op=op_id, shard=shard_index(shard), keys=deleted
        )
        lost = list(observer.observe())
        desired = self.losspath.retire_lost(provider, shard, desired, lost, op_id)
        retired = {item.instance_key for item in lost}
        left = [k for k in keys if k not in retired]
        tokens = Tokens({k: t for k, t in tokens.tokens.items() if k in left}, tokens.deadline)
        with self.terraform.planned(shard, self.wanted(desired, left), scope, tokens=tokens) as planned:
            return self.apply_started(provider, shard, op_id, left, desired, planned), retired, tokens

    @staticmethod
    def wanted(desired: Mapping[str, InstanceSpec], keys: Sequence[str]) -> dict[str, InstanceSpec]:
        """The desired set with ``keys`` started."""
        return {**desired, **{k: started(desired[k]) for k in keys}}

    def apply_started(
        self,
        provider: str,
        shard: ProviderWorkdir,
        op_id: str,
        keys: Sequence[str],
        desired: Mapping[str, InstanceSpec],
        planned: tuple[Any, Any, dict[str, Any]],
    ) -> Mapping[str, Any] | None:
        """The start's plan checked (updates only ``keys``), the desired set written, applied."""
        plan, plan_file, variables = planned
        updates = check_start(plan, set(keys), f"op {op_id} on provider {provider}")
        shard.desired.write(variables)  # the start is durable before the cloud call
        self.parts.recorder.audit("op-desired", provider=provider, op=op_id, start=sorted(keys), updates=updates)
        if not updates:
            return None  # started already (a resume after the apply): nothing to ask of the cloud
        names = {k: desired[k].name for k in keys}
        return self.terraform.apply(provider, shard, plan_file, op_id, plan, names)

    def record_started(
        self,
        provider: str,
        shard: ProviderWorkdir,
        op_id: str,
        template: str,
        keys: Sequence[str],
        applied: Mapping[str, Any] | None,
        tokens: Tokens | None = None,
    ) -> list[Created]:
        """One ``expectedHost`` of this op per started key, with a join deadline from now (a
        first-boot key's: its token's expiry, as a created host's)."""
        held = self.terraform.state_instances(shard, applied)
        missing = [k for k in keys if k not in held]
        if missing:
            raise FinalError(f"op {op_id}: Terraform holds no instance for {', '.join(missing)}; the op stays open")
        deadline = self.parts.clock() + float(self.parts.config.providers[provider].join_deadline)
        epoch = self.parts.recorder.gate(provider, op_id, "instance facts")
        # A started instance's state no longer carries the pool tag: a host like a new one.
        minted = (tokens or Tokens()).deadlines()
        created = [self.creates.held_host(provider, op_id, k, held[k], template, minted.get(k, deadline)) for k in keys]
        self.parts.recorder.commit_many([expected_host(provider, op_id, epoch, c) for c in created])
        return created
