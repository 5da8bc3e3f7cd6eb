"""The bake op: a builder instance, the bake play on it, an image of it, the builder returned.

``xceprov image bake`` (docs/images.md) as one op, on the executor's fenced path like a create
and a return, composed from their collaborators (never extending them):

1. gate → ``requestIntent`` (count 1, ``detail`` ``bake: ...``) → the builder placed on a shard
   and grown there as any instance (:meth:`CreateOp.grow`: checked plan, desired set, fenced
   apply); its tags are the owner tags plus ``xce:kind=builder``; its image the base image.
   ``instanceCreated`` is committed, no ``expectedHost``: a builder never joins;
2. the bake play on it (the caller's ``run``: the push bootstrap with ``xce_node_manager_bake``);
3. on success, the image: shard 0's desired set gains it in ``images`` (key ``<op_id>-image``,
   tags :func:`~orchestrator.model.images.image_tags`), planned, checked to create exactly it
   (:func:`~orchestrator.ops.plancheck.check_images`), written, applied under the fence;
4. ALWAYS, success or not (a failed play, a refused image), the builder returned by the return
   op (``returning``/``returned`` facts, checked delete), unless the lease itself is lost (then
   the op's facts say what is left, and the orphan scan reports the builder).

Idempotent by op id: the builder's key is the cloud's idempotency token, and an image already
made for the op (its key in shard 0's state) is not made again.

An image is deleted by :meth:`BakeOp.delete_image` (``xceprov image delete``): gate →
``returning`` fact (``detail`` ``image``) → shard 0's desired set without it, planned, checked
to delete exactly it, applied → ``returned``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import FinalError, LeaseLost, UsageError
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.images import (
    IMAGE_DETAIL,
    KIND,
    KIND_BUILDER,
    BakedImage,
    BuiltFrom,
    ImageSpec,
    image_key,
    image_tags,
    with_template_image,
)
from orchestrator.model.instances import InstanceSpec, instance_key
from orchestrator.model.modules import ProviderModule, provider_module
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor.create import CreateOp
from orchestrator.ops.executor.parts import OpParts, op_scope
from orchestrator.ops.executor.results import Created
from orchestrator.ops.executor.returnop import ReturnOp
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.fence import epoch_tag
from orchestrator.ops.plancheck import check_images
from orchestrator.ops.refusal import refusals
from orchestrator.ops.steps import render_instances
from orchestrator.render.instances import RenderRequest
from orchestrator.workspace.terraform import images_output
from orchestrator.workspace.workdir import ProviderWorkdir

# The bake play on the builder: (provider, the builder) → its outcome ("ok", "changed",
# "failed: why", ...), as the bootstrap's (``services/bootstrap.py``).
BakeRun = Callable[[str, Created], str]

# The outcomes of a play that leave the builder baked (``executor.results.BOOTSTRAPPED``).
_BAKED = ("ok", "changed")


@dataclass
class BakeResult:
    """What a bake op did: its builder, the play's outcome, the image (when made), the return."""

    op_id: str
    provider: str
    template: str
    builder_key: str
    built_from: BuiltFrom
    builder_id: str = ""
    outcome: str = ""
    image_key: str = ""
    image_id: str = ""
    returned: bool = False
    tags: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``image bake --json`` document."""
        return {
            "image_id": self.image_id,
            "op_id": self.op_id,
            "provider": self.provider,
            "template": self.template,
            "builder": {"key": self.builder_key, "id": self.builder_id, "returned": self.returned},
            "bake": self.outcome,
            "built_from": self.built_from.tags(),
        }


@dataclass
class DeleteResult:
    """What an image delete did (or, with ``dry_run``, would do)."""

    op_id: str
    provider: str
    image_id: str
    image_key: str
    dry_run: bool
    deleted: list[str] = field(default_factory=list)


def bake_module(config_module: str, provider: str) -> ProviderModule:
    """The registry entry of a provider that can bake; a one-line refusal otherwise (exit 2)."""
    entry = provider_module(config_module)
    if entry is None or not entry.image_types:
        why = entry.image_refusal if entry is not None else "it is not in the provider-module registry"
        raise UsageError(f"provider {provider}: module {config_module} cannot bake images: {why}")
    return entry


class BakeOp:
    """Bakes images of templates and deletes them (see the module docstring)."""

    def __init__(
        self, parts: OpParts, shardset: ShardSet, terraform: TerraformSteps, creates: CreateOp, returns: ReturnOp
    ) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.creates = creates
        self.returns = returns

    # -- bake ------------------------------------------------------------------------------------

    def bake(self, provider: str, template: str, op_id: str, built: BuiltFrom, run: BakeRun) -> BakeResult:
        """Bake an image of ``template`` on ``provider`` from ``built.base_image`` (module docstring)."""
        module = self.parts.config.providers[provider].module
        bake_module(module, provider)
        result = BakeResult(op_id, provider, template, instance_key(op_id, 0), built, image_key=image_key(op_id))
        made = self.made_image(provider, op_id)
        if made:
            result.image_id = made
            result.outcome = "already baked"
            result.returned = self.return_builder(provider, op_id, result.builder_key)
            return result
        failure: BaseException | None = None
        try:
            with refusals(module):
                builder = self.launch_builder(provider, template, op_id, built.base_image)
            result.builder_id = builder.instance_id
            result.outcome = run(provider, builder)
            self.parts.recorder.audit(
                "bake-play", provider=provider, op=op_id, host=builder.name, outcome=result.outcome
            )
            if result.outcome.split(":")[0] not in _BAKED:
                raise FinalError(
                    f"op {op_id}: the bake play on builder {builder.name} did not succeed ({result.outcome}); "
                    "no image made, the builder is returned"
                )
            with refusals(module):
                result.image_id = self.make_image(provider, template, op_id, builder, built)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            # The builder is returned whatever happened, except when the fence is closed (every
            # step would be refused): the facts then hold it, and the orphan scan reports it.
            if not isinstance(failure, LeaseLost):
                try:
                    result.returned = self.return_builder(provider, op_id, result.builder_key)
                except Exception as exc:  # reported; the bake's own failure wins
                    self.parts.recorder.audit(
                        "bake-builder-kept", provider=provider, op=op_id, key=result.builder_key, error=str(exc)[:500]
                    )
                    if failure is None:
                        raise
        return result

    def launch_builder(self, provider: str, template: str, op_id: str, base_image: str) -> Created:
        """The builder: intent, placement, checked apply, ``instanceCreated`` (module docstring, 1)."""
        key = instance_key(op_id, 0)
        shards = self.shardset.shards(provider)
        self.shardset.workdir(provider)
        with shards.placement_lock():
            epoch = self.parts.recorder.gate(provider, op_id, "intent")
            spec = self.builder_spec(provider, template, op_id, base_image, epoch_tag(epoch))
            # A key desired already (a second run of the op) stays on its shard.
            shard = next(iter(shards.place(op_id, [key])))
            self.creates.checked_desired(self.shardset.prepared(shard))
            self.parts.recorder.commit(
                Fact(
                    FactKind.REQUEST_INTENT,
                    provider,
                    op_id,
                    epoch,
                    template=template,
                    count=1,
                    detail=f"bake: image {image_key(op_id)} from {base_image}",
                )
            )
            self.parts.recorder.audit("bake-intent", provider=provider, op=op_id, template=template, base=base_image)
            with shard.lock():
                desired = self.terraform.desired(shard)
                outputs = None
                if key not in self.terraform.state_instances(shard):
                    # A key desired and not held (a second run of the op) is planned as the op's create again.
                    grown = self.creates.grow(provider, shard, op_id, {key: desired.get(key, spec)})
                    outputs = grown.outputs
                inst = self.terraform.state_instances(shard, outputs).get(key)
        return self.record_builder(provider, op_id, template, key, inst)

    def record_builder(
        self, provider: str, op_id: str, template: str, key: str, inst: Mapping[str, Any] | None
    ) -> Created:
        """``instanceCreated`` of the builder (no ``expectedHost``: a builder never joins)."""
        if inst is None:
            raise FinalError(f"op {op_id}: Terraform holds no builder {key} after the apply")
        epoch = self.parts.recorder.gate(provider, op_id, "builder fact")
        created = Created(
            key, str(inst.get("id", "")), str(inst.get("name", "")), str(inst.get("address") or ""), template, 0.0
        )
        self.parts.recorder.commit(
            Fact(
                FactKind.INSTANCE_CREATED,
                provider,
                op_id,
                epoch,
                instance_key=key,
                instance_id=created.instance_id,
                template=template,
                host_name=created.name,
                address=created.address,
                detail="bake builder",
            )
        )
        return created

    def finish_interrupted(self, provider: str, op_id: str, template: str) -> bool:
        """An open bake found by ``ops resume`` (its builder's intent without ``instanceCreated``):
        the builder applied as the op intended (its key is the cloud's idempotency token, so no
        twin), recorded, and returned; the bake itself is not carried on (bake again). False when
        no desired set holds the builder (the crash came before it: resume abandons the intent)."""
        key = instance_key(op_id, 0)
        shard = self.holder(provider, key)
        if shard is None:
            return False
        with shard.lock(), refusals(self.parts.config.providers[provider].module):
            outputs = None
            if key not in self.terraform.state_instances(shard):
                desired = self.terraform.desired(shard)
                outputs = self.creates.grow(provider, shard, op_id, {key: desired[key]}).outputs
            inst = self.terraform.state_instances(shard, outputs).get(key)
        self.record_builder(provider, op_id, template, key, inst)
        self.return_builder(provider, op_id, key)
        return True

    def builder_spec(self, provider: str, template: str, op_id: str, base_image: str, epoch: str) -> InstanceSpec:
        """The builder rendered as the template's instance, from ``base_image``, tagged a builder,
        with no user data: the template's would write the builder's own node-manager
        configuration, the CA and the in-host lifetime files, which the image must not hold."""
        config = with_template_image(self.parts.config, template, provider, base_image)
        request = RenderRequest(provider, template, op_id, 1, epoch=epoch)
        [spec] = render_instances(config, self.parts.root, request).values()
        return spec.model_copy(update={"tags": {**spec.tags, KIND: KIND_BUILDER}, "user_data": ""})

    def holder(self, provider: str, key: str) -> ProviderWorkdir | None:
        """The shard whose desired set holds ``key`` already (None: no shard)."""
        for shard in self.shardset.shard_list(provider):
            with shard.lock():
                if key in self.terraform.desired(shard):
                    return shard
        return None

    def make_image(self, provider: str, template: str, op_id: str, builder: Created, built: BuiltFrom) -> str:
        """The image of ``builder`` in shard 0's desired set, planned, checked, applied; its id."""
        key = image_key(op_id)
        epoch = self.parts.recorder.gate(provider, op_id, "image")
        config = self.parts.config
        spec = ImageSpec(
            name=f"{config.cluster}-{template}-{op_id}"[:128],
            instance_id=builder.instance_id,
            tags=image_tags(config.cluster, provider, op_id, epoch_tag(epoch), template, built),
        )
        shard = self.shardset.workdir(provider)
        with shard.lock():
            desired = self.terraform.desired(shard)
            images = {**shard.desired.images(), key: spec}
            what = f"op {op_id}: image of {builder.name} on provider {provider}"
            with self.terraform.planned(shard, desired, op_scope(provider, op_id), images) as (plan, plan_file, var):
                check_images(plan, what, create={key})
                shard.desired.write(var)  # the image is intended (durable) before the cloud call
                self.parts.recorder.audit("image-desired", provider=provider, op=op_id, key=key, source=builder.key)
                outputs = self.terraform.apply(provider, shard, plan_file, op_id)
            made = images_output(dict(outputs) if outputs is not None else self.parts.engine.output(shard.path))
        image_id = made.get(key, {}).get("id", "")
        if not image_id:
            raise FinalError(f"op {op_id}: Terraform holds no image {key} after the apply")
        self.parts.recorder.audit("image-made", provider=provider, op=op_id, key=key, image=image_id, **spec.tags)
        return image_id

    def made_image(self, provider: str, op_id: str) -> str:
        """The id of the image op ``op_id`` made already ("" when none): a second run is a no-op."""
        shard = self.shardset.workdir(provider)
        with shard.lock():
            if image_key(op_id) not in shard.desired.images():
                return ""
            return images_output(self.parts.engine.output(shard.path)).get(image_key(op_id), {}).get("id", "")

    def return_builder(self, provider: str, op_id: str, key: str) -> bool:
        """The builder returned through the return op when a shard's desired set holds it."""
        if self.holder(provider, key) is None:
            return False
        # A builder never joined: nothing to drain at the controller.
        self.returns.return_instances(
            provider, [key], drain=DrainSettings(drain=False), reason=f"bake op {op_id}: the builder's work is done"
        )
        return True

    # -- delete ----------------------------------------------------------------------------------

    def kept_images(self, provider: str) -> list[BakedImage]:
        """The images shard 0's desired set keeps and its state holds (``destroy --all`` deletes them)."""
        shard = self.shardset.workdir(provider)
        with shard.lock():
            images = shard.desired.images()
            held = images_output(self.parts.engine.output(shard.path)) if images else {}
        return [
            BakedImage(held[key]["id"], spec.name, held[key]["created_at"], "available", dict(spec.tags))
            for key, spec in sorted(images.items())
            if held.get(key, {}).get("id")
        ]

    def delete_image(self, provider: str, image: BakedImage, op_id: str, dry_run: bool = False) -> DeleteResult:
        """Delete ``image`` (this cluster's and provider's, a bake): fenced, intent first (module docstring)."""
        config = self.parts.config
        if not image.is_bake() or not image.owned_by(config.cluster, provider):
            raise UsageError(
                f"image {image.id}: not a baked image of cluster {config.cluster} on provider {provider} "
                "(its owner tags say otherwise); refused, nothing deleted"
            )
        shard = self.shardset.workdir(provider)
        with shard.lock(), refusals(config.providers[provider].module):
            images = shard.desired.images()
            held = images_output(self.parts.engine.output(shard.path))
            key = next((k for k, v in held.items() if v.get("id") == image.id and k in images), "")
            if not key:
                raise FinalError(
                    f"image {image.id}: carries this cluster's tags but no state of provider {provider} holds it; "
                    "delete it with the cloud's own tools (docs/images.md)"
                )
            result = DeleteResult(op_id, provider, image.id, key, dry_run)
            rest = {k: v for k, v in images.items() if k != key}
            desired = self.terraform.desired(shard)
            with self.terraform.planned(shard, desired, op_scope(provider, op_id), rest) as (plan, plan_file, var):
                check_images(plan, f"op {op_id}: delete of image {image.id}", delete={key})
                result.deleted = [key]
                self.parts.recorder.audit(
                    "image-delete-dry-run" if dry_run else "image-delete",
                    provider=provider,
                    op=op_id,
                    key=key,
                    image=image.id,
                )
                if dry_run:
                    return result
                self._delete(provider, shard, op_id, key, image, var, plan_file)
        return result

    def _delete(
        self,
        provider: str,
        shard: ProviderWorkdir,
        op_id: str,
        key: str,
        image: BakedImage,
        variables: Mapping[str, Any],
        plan_file: Path,
    ) -> None:
        epoch = self.parts.recorder.gate(provider, op_id, "returning image")
        self.parts.recorder.commit(self._image_fact(FactKind.RETURNING, provider, op_id, epoch, key, image))
        shard.desired.write(variables)
        outputs = self.terraform.apply(provider, shard, plan_file, op_id)
        left = images_output(dict(outputs) if outputs is not None else self.parts.engine.output(shard.path))
        if key in left:
            raise FinalError(f"op {op_id}: image {image.id} still in the Terraform state after the apply")
        epoch = self.parts.recorder.gate(provider, op_id, "returned image")
        self.parts.recorder.commit(self._image_fact(FactKind.RETURNED, provider, op_id, epoch, key, image))
        self.parts.recorder.audit("image-deleted", provider=provider, op=op_id, key=key, image=image.id)

    @staticmethod
    def _image_fact(kind: FactKind, provider: str, op_id: str, epoch: Epoch, key: str, image: BakedImage) -> Fact:
        return Fact(
            kind,
            provider,
            op_id,
            epoch,
            instance_key=key,
            instance_id=image.id,
            template=image.template,
            detail=IMAGE_DETAIL,
        )
