"""Terminating a cloud object no Terraform state holds, through the fenced return path."""

from __future__ import annotations

import json
from collections.abc import Mapping

from orchestrator.errors import UsageError
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import instance_key, new_op_id
from orchestrator.ops.executor.create import CreateOp
from orchestrator.ops.executor.parts import OpParts
from orchestrator.ops.executor.returnop import ReturnOp
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.steps import desired_variables


class UnmanagedTermination:
    """Ends an orphan the policy or an administrator chose to end: rendered as a create renders,
    removed as a return removes."""

    def __init__(
        self, parts: OpParts, shardset: ShardSet, terraform: TerraformSteps, creates: CreateOp, returns: ReturnOp
    ) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.creates = creates
        self.returns = returns

    def terminate_unmanaged(self, provider: str, object_id: str, tags: Mapping[str, str], reason: str) -> str:
        """Terminate a cloud object no Terraform state holds (an orphan the policy or an administrator
        chose to end), through the same fenced return path; the op id.

        The ``returning`` intent (with the lease epoch and the object's id) is committed before any
        cloud call. The object is imported into shard 0's state under a key of its own (the key is
        in the variables of that import only, never in the desired set), so the next plan, of the
        unchanged desired set, deletes exactly that key; :meth:`ReturnOp.remove` checks, applies and records
        ``returned``. A crash leaves an open return op that resume completes.
        """
        if tags.get(owner.CLUSTER) != self.parts.config.cluster or tags.get(owner.PROVIDER) != provider:
            raise UsageError(f"{object_id}: not tagged for cluster {self.parts.config.cluster}, provider {provider}")
        templates = [n for n, t in sorted(self.parts.config.templates.items()) if provider in t.providers]
        template = tags.get(owner.TEMPLATE, "")
        template = template if template in templates else (templates[0] if templates else "")
        if not template:
            raise UsageError(f"provider {provider}: no template runs there, so no instance can be imported")
        op_id = new_op_id()
        key = instance_key(op_id, 0)
        workdir = self.shardset.workdir(provider)
        epoch = self.parts.recorder.gate(provider, op_id, "returning intent")
        detail = json.dumps({"unmanaged": True, "reason": reason})[:4000]
        self.parts.recorder.commit(
            Fact(FactKind.RETURNING, provider, op_id, epoch, key, object_id, template, detail=detail)
        )
        with workdir.lock():
            desired = self.terraform.desired(workdir)
            # Imported to be deleted: its image is never launched, bake:newest stays unresolved.
            spec = self.creates.render(provider, template, 1, op_id, epoch, resolve=False)[key]
            variables = desired_variables(self.parts.config, workdir, {**desired, key: spec})
            address = workdir.entry.instance_address(key)
            self.parts.recorder.gate(provider, op_id, "import")
            self.parts.recorder.audit(
                "op-import", provider=provider, op=op_id, key=key, instance=object_id, reason=reason
            )
            with workdir.candidate_var_file(variables) as var_file:
                self.parts.engine.import_resource(workdir.path, address, object_id, var_files=[var_file])
            self.returns.remove(provider, workdir, op_id, [key], {**desired, key: spec})
        return op_id
