"""Closing a create the cloud refused, so its hosts can be asked for elsewhere.

The gap counts every key of an open create as coming (``awaited``); a fallback to the next
provider is only safe once the refused keys are recorded gone (docs/design-reconcile.md, "Demand,
exactly"). :meth:`RefusedClose.close` does that, shard by shard under each shard's lock, the way
resume's abandon does:

* keys Terraform holds (created before the refusal) get their ``instanceCreated`` and
  ``expectedHost`` facts: they exist and join like any other;
* keys in the desired set but not in the state leave the desired set (planned and checked:
  the plan may delete nothing) and are recorded ``returned``;
* keys never written to a desired set are recorded ``returned`` with the reason.

Before anything is closed, the cloud's tagged listing is read: when it shows more live objects
of the op than Terraform holds, a create did reach the cloud without Terraform learning of it
(a lost response). Closing would leak it, so the op is left open (:class:`StillLaunched`) and
its retry re-applies the same keys, which the cloud's idempotency token answers with the
instance it made.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import FinalError
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.executor.create import CreateOp
from orchestrator.ops.executor.parts import OpParts
from orchestrator.ops.executor.resumeop import tagged_objects
from orchestrator.ops.executor.returnop import ReturnOp
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.openops import OpenOp
from orchestrator.workspace.workdir import ProviderWorkdir


class StillLaunched(FinalError):
    """The cloud shows instances of the op that Terraform does not hold: it is not closed."""


class RefusedClose:
    """Closes a create the cloud refused (see the module docstring) with the create and return
    ops' own steps."""

    def __init__(
        self, parts: OpParts, shardset: ShardSet, terraform: TerraformSteps, creates: CreateOp, returns: ReturnOp
    ) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.creates = creates
        self.returns = returns

    def close(self, op: OpenOp, reason: str, *, check_listing: bool = True) -> dict[str, Any]:
        """Close the refused create ``op`` (see the module docstring); the evidence of what was done.

        ``check_listing`` False skips the listing (one refresh of the provider's instances): the
        caller knows the cloud refused the failed instances themselves (capacity, quota, a bad
        request), so none of them can have been launched.
        """
        provider = op.provider
        recorder = self.parts.recorder
        pending = set(op.pending)
        shards = self.shardset.shard_list(provider)
        status = "not read: the cloud refused the instances"
        if check_listing:
            status = self._check_listing(op, shards)
        evidence: dict[str, Any] = {"op": op.op_id, "listing": status, "recorded": [], "dropped": [], "never": []}
        placed: set[str] = set()
        for shard in shards:
            with shard.lock():
                held = self._held(shard, pending)
                desired = self.terraform.desired(shard)
                mine_held = sorted(k for k in pending if k in held)
                unapplied = sorted(k for k in pending if k in desired and k not in held)
                if unapplied:
                    self.returns.remove(provider, shard, op.op_id, unapplied, desired)
                    evidence["dropped"] += unapplied
                if mine_held:
                    if not set(mine_held) <= set(self.terraform.state_instances(shard)):
                        # The failed apply did create these but never wrote its outputs: an apply
                        # that changes no resource writes them, and the instances are kept.
                        self.terraform.sync_outputs(provider, shard, op.op_id)
                        evidence["outputs_synced"] = True
                    self.creates.record_created(provider, shard, op.op_id, op.template, mine_held)
                    evidence["recorded"] += mine_held
                placed.update(mine_held, unapplied)
        never = sorted(pending - placed)
        if never:
            epoch = recorder.gate(provider, op.op_id, "close refused")
            detail = json.dumps({"closed": reason, "state": "never in a desired set"})
            for key in never:
                recorder.commit(
                    Fact(
                        FactKind.RETURNED,
                        provider,
                        op.op_id,
                        epoch,
                        instance_key=key,
                        template=op.template,
                        detail=detail,
                    )
                )
            evidence["never"] = never
        recorder.audit("reconcile-op-closed", provider=provider, reason=reason, **evidence)
        return evidence

    def _check_listing(self, op: OpenOp, shards: list[ProviderWorkdir]) -> str:
        """The listing's status; ``StillLaunched`` when it shows more of the op than Terraform holds."""
        pending = set(op.pending)
        held: set[str] = set()
        for shard in shards:
            with shard.lock():
                held.update(k for k in self._held(shard, pending) if k in pending)
        status, objects = tagged_objects(self.parts.engine, self.shardset.workdir(op.provider))
        live = [o for o in objects if o["tags"].get(owner.OP_ID) == op.op_id and o["state"] not in ("terminated",)]
        # ``done`` counts the op's keys already accounted for (created, or gone): an upper bound of
        # the live ones Terraform knew before, so only a real surplus stops the close.
        known = len(held) + op.done
        if len(live) > known:
            raise StillLaunched(
                f"op {op.op_id}: the cloud lists {len(live)} live instances of the op, Terraform holds "
                f"{known}; left open for a retry (the instance key is the cloud's idempotency token)"
            )
        return status

    def _held(self, shard: ProviderWorkdir, pending: set[str]) -> set[str]:
        """The op's keys Terraform holds in ``shard``: the outputs, or the state's own resources when
        the outputs miss some (a failed apply creates instances without writing its outputs)."""
        held = set(self.terraform.state_instances(shard))
        if pending <= held:
            return held
        return held | self.terraform.state_keys(shard)
