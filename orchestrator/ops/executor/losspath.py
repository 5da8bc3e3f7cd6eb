"""The host-loss path: ``lost`` facts for instances the cloud took away, their keys out of the desired set."""

from __future__ import annotations

import json
from collections.abc import Sequence

from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import InstanceSpec, op_of_key
from orchestrator.ops.executor.parts import OpParts
from orchestrator.ops.hostloss import LostInstance
from orchestrator.ops.steps import desired_variables
from orchestrator.workspace.workdir import ProviderWorkdir


class LossPath:
    """Retires lost instances before an apply (docs/operations.md, host loss)."""

    def __init__(self, parts: OpParts) -> None:
        self.parts = parts

    def drop_lost(
        self, provider: str, workdir: ProviderWorkdir, desired: dict[str, InstanceSpec], op_id: str
    ) -> dict[str, InstanceSpec]:
        """The host-loss path before a return's plan (the observer reads the cloud itself): ``lost``
        facts, keys out of the desired set, never re-created. A create observes with its own plan
        instead (:meth:`CreateOp.grow`)."""
        if not desired:
            return desired  # nothing managed yet: nothing can have been lost
        observer = self.parts.losses(self.parts.engine, workdir)
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
        epoch = self.parts.recorder.gate(provider, op_id, "lost facts")
        facts: list[Fact] = []
        for item in lost:
            spec = desired.get(item.instance_key)
            detail = json.dumps({"reason": item.reason, **item.evidence}, sort_keys=True, default=str)
            facts.append(
                Fact(
                    FactKind.LOST,
                    provider,
                    # The op that made the instance (its key says which): a loss reported again by a
                    # later observation (the state holds it until an apply) is the same fact.
                    spec.tags.get(owner.OP_ID, op_id) if spec else op_of_key(item.instance_key) or op_id,
                    epoch,
                    instance_key=item.instance_key,
                    instance_id=item.instance_id,
                    template=spec.template if spec else "",
                    detail=detail[:4000],
                )
            )
        self.parts.recorder.commit_many(facts)
        remaining = {k: v for k, v in desired.items() if k not in {i.instance_key for i in lost}}
        workdir.desired.write(desired_variables(self.parts.config, workdir, remaining))
        self.parts.recorder.audit("desired-lost-removed", provider=provider, keys=sorted(i.instance_key for i in lost))
        return remaining
