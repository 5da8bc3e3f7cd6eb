"""The return op: busy hosts drained or refused, ``returning`` facts, the desired set shrunk, ``returned`` facts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from orchestrator.clients.controller.types import HostInfo
from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import FinalError, UsageError
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.ops.drain import DrainSettings, settle_hosts
from orchestrator.ops.executor.losspath import LossPath
from orchestrator.ops.executor.parts import OpParts, op_scope
from orchestrator.ops.executor.results import ReturnResult
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.plancheck import check_delete
from orchestrator.workspace.workdir import ProviderWorkdir


class ReturnOptions(TypedDict, total=False):
    """How a return is carried out (the keywords of :meth:`ReturnOp.return_instances`)."""

    drain: DrainSettings | None
    dry_run: bool
    max_delete: int | None
    reason: str


class ReturnOp:
    """Returns instances of a provider as one op (see :mod:`orchestrator.ops.executor`)."""

    def __init__(self, parts: OpParts, shardset: ShardSet, terraform: TerraformSteps, losspath: LossPath) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.losspath = losspath

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
        op_id = new_op_id(self.parts.clock())
        chosen = sorted(set(keys))
        result = ReturnResult(op_id, provider, chosen, dry_run=dry_run)
        groups = self.group_by_shard(provider, chosen)
        what = f"return of {len(chosen)} instances on {provider}"

        def check(shard: ProviderWorkdir, shard_keys: list[str]) -> tuple[dict[str, str], PlanResult, list[str]]:
            with shard.lock():
                desired = self.terraform.desired(shard)
                remaining = {k: v for k, v in desired.items() if k not in shard_keys}
                with self.terraform.planned(shard, remaining, op_scope(provider, op_id)) as (
                    plan,
                    _plan_file,
                    _variables,
                ):
                    deletes = check_delete(plan, set(shard_keys), what)
            return {k: desired[k].name for k in shard_keys}, plan, deletes

        for names, plan, deletes in self.shardset.run_shards(groups.items(), check):
            result.names.update(names)
            result.plans.append(plan)
            result.deleted.extend(deletes)
        # --max counts Terraform's deletions over every shard of the op.
        self._check_max(result.deleted, max_delete)
        result.plan = result.plans[0] if result.plans else None
        self.parts.recorder.audit(
            "op-return-dry-run" if dry_run else "op-return",
            provider=provider,
            op=op_id,
            keys=chosen,
            deletes=result.deleted,
            reason=reason,
        )
        if dry_run:
            return result
        joined = settle_hosts(self.parts, provider, op_id, chosen, drain)
        result.drained = sorted(joined) if drain.drain else []

        def one(shard: ProviderWorkdir, shard_keys: list[str]) -> None:
            with shard.lock():
                self.shrink(provider, shard, op_id, shard_keys, joined, max_delete)

        self.shardset.run_shards(groups.items(), one)
        return result

    def group_by_shard(self, provider: str, keys: Sequence[str]) -> dict[ProviderWorkdir, list[str]]:
        """``keys`` by the shard whose desired set holds them; a key no shard holds is refused."""
        wanted = set(keys)
        groups: dict[ProviderWorkdir, list[str]] = {}
        for shard in self.shardset.shard_list(provider):
            with shard.lock():
                held = [k for k in self.terraform.desired(shard) if k in wanted]  # refuses a missing desired set
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
        desired = self.losspath.drop_lost(provider, workdir, self.terraform.desired(workdir), op_id)
        held = self.terraform.state_instances(workdir)
        epoch = self.parts.recorder.gate(provider, op_id, "returning facts")
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
        self.parts.recorder.commit_many(returning)  # every intent is durable before the desired set shrinks
        self.remove(provider, workdir, op_id, keys, desired, max_delete)

    def complete_shard(self, provider: str, shard: ProviderWorkdir, op_id: str, keys: Sequence[str]) -> list[str]:
        """An open return op carried to its end on one shard (``ops resume``; its lock held): the
        host-loss path first, as every return's (:meth:`shrink`), then ``keys`` removed; the keys
        found lost on the way (their ``lost`` fact is their outcome).

        An instance the cloud took back while the op was open (a spot reclaim) leaves the desired
        set, so the plan neither re-creates it (a refused plan, the op open for ever) nor waits for
        its deletion.
        """
        before = self.terraform.desired(shard)
        desired = self.losspath.drop_lost(provider, shard, before, op_id)
        lost = [k for k in keys if k in before and k not in desired]
        left = [k for k in keys if k not in lost]
        if left:
            self.remove(provider, shard, op_id, left, desired)
        return lost

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
        with self.terraform.planned(workdir, remaining, op_scope(provider, op_id)) as (plan, plan_file, variables):
            deletes = check_delete(plan, set(keys), f"op {op_id} on provider {provider}")
            self._check_max(deletes, max_delete)
            workdir.desired.write(variables)
            self.parts.recorder.audit("op-desired", provider=provider, op=op_id, remove=sorted(keys), deletes=deletes)
            outputs = None
            if deletes:
                names = {k: desired[k].name for k in keys if k in desired}
                outputs = self.terraform.apply(provider, workdir, plan_file, op_id, plan, names)
        held = self.terraform.state_instances(workdir, outputs)
        still = [k for k in keys if k in held]
        if still:
            raise FinalError(f"op {op_id}: {', '.join(still)} still in the Terraform state after the apply")
        epoch = self.parts.recorder.gate(provider, op_id, "returned facts")
        self.parts.recorder.commit_many(
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
        self.parts.recorder.audit("op-returned", provider=provider, op=op_id, keys=list(keys))
        return deletes
