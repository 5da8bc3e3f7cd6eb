"""The Terraform steps on one shard: its desired set and state read, a saved plan, a fenced apply."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.backend import ERRORED_STATE
from orchestrator.clients.terraform.messages import ApplyResult, PlanResult
from orchestrator.errors import FinalError, LeaseLost, StoreLost
from orchestrator.model.images import ImageSpec
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.progress import PlanDone, no_progress, reported_phase
from orchestrator.ops.executor.parts import OpParts, op_scope, shard_index
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.fence import epoch_tag
from orchestrator.ops.firstboot import Tokens, ephemeral_beside, write_ephemeral
from orchestrator.ops.plancheck import check_delete, resource_keys
from orchestrator.ops.progress import ApplyTracker
from orchestrator.ops.steps import desired_variables, plan_desired
from orchestrator.workspace.erroredstate import has_errored_state
from orchestrator.workspace.scratch import op_scratch
from orchestrator.workspace.terraform import instances_output
from orchestrator.workspace.workdir import ProviderWorkdir


class TerraformSteps:
    """Terraform on one shard (the shard's lock is held by the caller where it matters), and
    what a provider's shards hold, merged."""

    def __init__(self, parts: OpParts, shardset: ShardSet) -> None:
        self.parts = parts
        self.shardset = shardset

    def provider_desired(self, provider: str) -> dict[str, InstanceSpec]:
        """The desired sets of every shard, merged (each read under its shard's lock)."""
        merged: dict[str, InstanceSpec] = {}
        for shard in self.shardset.shard_list(provider):
            with shard.lock():
                merged.update(self.desired(shard))
        return merged

    def provider_instances(self, provider: str) -> dict[str, dict[str, Any]]:
        """The instances of every shard's Terraform state, merged (key → id, name, address, tags)."""
        merged: dict[str, dict[str, Any]] = {}
        for shard in self.shardset.shard_list(provider):
            merged.update(self.state_instances(shard))
        return merged

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
            return instances_output(dict(applied), workdir.labels)
        return instances_output(self.parts.engine.output(workdir.path), workdir.labels)

    def state_keys(self, workdir: ProviderWorkdir) -> set[str]:
        """Every instance key some resource of the state is indexed by (outputs not needed)."""
        return resource_keys(self.parts.engine.show_state(workdir.path))

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
        if not current and not workdir.desired.exists():
            held = self.state_instances(workdir)
            if held:
                raise FinalError(
                    f"{workdir.desired.record}: missing, but the Terraform state of provider {workdir.provider} "
                    f"holds {len(held)} instances; refusing to read that as 'delete everything' "
                    "(restore the file from a backup, or see docs/operations.md)"
                )
        return current

    def listable(self, workdir: ProviderWorkdir) -> None:
        """A provider never used has no desired set yet: write an empty one (what its first op
        would write first) so that its cloud can be listed. Never beside a state holding instances.

        With the shared store only the working directory's file is written (all a listing
        needs): a read, with or without the lease, never writes the store."""
        if workdir.desired.exists() or self.state_instances(workdir):
            return
        empty = desired_variables(self.parts.config, workdir, {})
        if workdir.desired.cached:
            workdir.desired.write_cache(empty)
        else:
            workdir.desired.write(empty)

    @contextlib.contextmanager
    def planned(
        self,
        workdir: ProviderWorkdir,
        instances: Mapping[str, InstanceSpec],
        scope: str = "",
        images: Mapping[str, ImageSpec] | None = None,
        tokens: Tokens | None = None,
    ) -> Iterator[tuple[PlanResult, Path, dict[str, Any]]]:
        """A saved plan of ``instances`` as the whole desired set: (result, plan file, variables).

        The plan is the shared step (:func:`orchestrator.ops.steps.plan_desired`, which the plan
        preview runs too), reported as one unit of the ``plan`` phase of ``scope``, with the root
        variable ``fence`` of this op (:meth:`plan_fence`), which is not part of the desired set.
        ``images``: the baked images planned (None: the current ones, unchanged).
        ``tokens``: the join tokens of the first-boot hosts the plan creates (``ops.firstboot``),
        written beside the saved plan for its :meth:`apply` and gone with it.
        """
        report = self.parts.progress or no_progress
        fence = self.plan_fence(workdir.provider)
        # Under the state directory, not $TMPDIR: a run killed mid-apply leaves it private, and
        # the next op removes it (workspace.scratch).
        with op_scratch(self.parts.config) as scratch:
            plan_file = scratch / "op.tfplan"
            ephemeral = write_ephemeral(plan_file, tokens or Tokens())
            with reported_phase(report, "plan", scope, 1):
                plan = plan_desired(
                    self.parts.config,
                    self.parts.engine,
                    workdir,
                    instances,
                    out=plan_file,
                    fence=fence,
                    scratch=scratch,
                    images=images,
                    ephemeral=[ephemeral] if ephemeral is not None else [],
                )
                summary = plan.result.summary
                report(PlanDone(scope, summary.add, summary.change, summary.remove))
            yield plan.result, plan_file, plan.variables

    def plan_fence(self, provider: str) -> str:
        """The epoch tag a plan hands its provider configuration (root variable ``fence``).

        A saved plan freezes the provider configuration, so the epoch goes in at plan time: the
        one the fence would stamp now, or "" when it is closed (such a plan never passes the
        apply's gate). A cloud that keeps a record of its calls (the simulated one) files each
        mutation of the run under it; the others ignore it (docs/provider-modules.md).
        """
        try:
            return epoch_tag(self.parts.fence.gate(provider))
        except LeaseLost:  # closed: this plan is a preview, or its apply will be refused
            return ""

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
        epoch = self.parts.recorder.gate(provider, op_id, "apply")
        self.parts.recorder.audit(
            "op-apply", provider=provider, op=op_id, shard=shard_index(workdir), epoch=epoch_tag(epoch)
        )
        tracker = None
        extra: dict[str, Any] = {}
        if self.parts.progress is not None and plan is not None:
            tracker = ApplyTracker(self.parts.progress, op_scope(provider, op_id), plan, names or {})
            # Only asked of the engine when someone listens: an engine without the hook still works.
            extra["on_event"] = tracker
        with contextlib.ExitStack() as stack:
            if tracker is not None and self.parts.progress is not None:
                stack.enter_context(
                    reported_phase(self.parts.progress, "apply", op_scope(provider, op_id), tracker.total)
                )
                stack.callback(tracker.finish)
            result = self._apply(provider, workdir, plan_file, op_id, extra)
        return result.outputs if isinstance(result.outputs.get("instances"), dict) else None

    def _apply(
        self, provider: str, workdir: ProviderWorkdir, plan_file: Path, op_id: str, extra: Mapping[str, Any]
    ) -> ApplyResult:
        try:
            result = self.parts.engine.apply(
                workdir.path,
                plan_file=plan_file,
                # A plan made with ephemeral variables (join tokens) is applied with them again.
                var_files=ephemeral_beside(plan_file),
                should_stop=lambda: not self.parts.fence.valid(provider),
                **extra,
            )
        except Exception as exc:
            self.parts.recorder.audit(
                "op-apply-failed",
                provider=provider,
                op=op_id,
                shard=shard_index(workdir),
                error=str(exc).splitlines()[0:1],
            )
            raise
        if result.interrupted and has_errored_state(workdir.path):
            # Terraform could not write the state its stop wrote: the store went away, and the
            # fence (a standalone lock in the same database, say) with it.
            self.parts.recorder.audit(
                "op-apply-interrupted",
                provider=provider,
                op=op_id,
                shard=shard_index(workdir),
                reason="the shared store stopped answering",
            )
            raise StoreLost(
                f"provider {provider}: the shared store stopped answering during the apply of op {op_id}, "
                "and the fence with it; Terraform stopped after its calls in flight and kept the state it could "
                f"not write in {workdir.path / ERRORED_STATE}, which the resume writes back first; nothing needs "
                "unlocking: xceprov ops resume once the database answers"
            )
        if result.interrupted:
            self.parts.recorder.audit(
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
