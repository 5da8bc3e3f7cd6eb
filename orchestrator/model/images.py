"""Baked images: their tags, the records of what each was built from, and ``bake:newest``.

An image of a host template is made by ``xceprov image bake`` (docs/images.md) from a builder
instance. Both carry the owner tags (``xce:cluster``, ``xce:provider``, ``xce:op_id``,
``xce:epoch``) and ``xce:template``; ``xce:kind`` tells a builder from an image. An image also
records what it was built from (:data:`RECORD_TAGS`), so that ``xceprov validate`` can say when a
template's image is older than what a bake would make today.

Data only: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model import tags as owner
from orchestrator.model.config import Config

KIND: Final = owner.KIND
KIND_IMAGE: Final = "image"
KIND_BUILDER: Final = "builder"

BUILT_FROM_IMAGE: Final = owner.BUILT_FROM_IMAGE
ROLE_VERSION: Final = owner.ROLE_VERSION
NODE_MANAGER_SHA256: Final = owner.NODE_MANAGER_SHA256
SITE_ROLES: Final = owner.SITE_ROLES
# What an image was built from, in the order ``image list`` shows them.
RECORD_TAGS: Final = (BUILT_FROM_IMAGE, ROLE_VERSION, NODE_MANAGER_SHA256, SITE_ROLES)
# The value of a record that does not apply (no site roles, no archive known).
NONE: Final = "none"

# A template's ``image:`` naming the newest available bake of that template on that provider.
BAKE_NEWEST: Final = "bake:newest"

# The ``detail`` of a bake's ``requestIntent`` fact starts so (``ops resume`` and the orphan
# scan tell a bake from a create by it).
BAKE_DETAIL: Final = "bake"
# The ``detail`` of an image's ``returning`` and ``returned`` facts (``xceprov image delete``).
IMAGE_DETAIL: Final = "image"


def image_key(op_id: str) -> str:
    """The key of the image a bake op makes (the Terraform map key of ``images``)."""
    return f"{op_id}-image"


def is_bake_detail(detail: str) -> bool:
    """Whether a ``requestIntent``'s detail marks a bake op's builder."""
    return detail == BAKE_DETAIL or detail.startswith(BAKE_DETAIL + ":")


class ImageSpec(BaseModel):
    """One entry of the ``images`` variable every provider module takes (docs/provider-modules.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    instance_id: str = Field(min_length=1)
    tags: dict[str, str]

    def terraform_value(self) -> dict[str, Any]:
        """The JSON value Terraform receives."""
        return self.model_dump()


@dataclass(frozen=True)
class BuiltFrom:
    """What a bake starts from and puts in: the image's record tags."""

    base_image: str
    role_version: str
    node_manager_sha256: str
    site_roles: str

    def tags(self) -> dict[str, str]:
        """The record tags (every value non-empty: a cloud drops empty tags)."""
        values = (self.base_image, self.role_version, self.node_manager_sha256, self.site_roles)
        return {key: value or NONE for key, value in zip(RECORD_TAGS, values, strict=True)}


def image_tags(cluster: str, provider: str, op_id: str, epoch: str, template: str, built: BuiltFrom) -> dict[str, str]:
    """Every tag of a baked image: the owner tags, its kind and template, what it was built from."""
    return {
        owner.CLUSTER: cluster,
        owner.PROVIDER: provider,
        owner.OP_ID: op_id,
        owner.EPOCH: epoch,
        owner.TEMPLATE: template,
        KIND: KIND_IMAGE,
        **built.tags(),
    }


@dataclass(frozen=True)
class BakedImage:
    """One image of the cluster's tagged image listing."""

    id: str
    name: str
    created: str
    state: str
    tags: dict[str, str] = field(hash=False)

    @property
    def template(self) -> str:
        """The template it was baked for ("" when not tagged)."""
        return self.tags.get(owner.TEMPLATE, "")

    @property
    def provider(self) -> str:
        """The provider it was baked on ("" when not tagged)."""
        return self.tags.get(owner.PROVIDER, "")

    @property
    def op_id(self) -> str:
        """The bake op that made it."""
        return self.tags.get(owner.OP_ID, "")

    @property
    def records(self) -> dict[str, str]:
        """What it was built from (the record tags it carries)."""
        return {key: self.tags[key] for key in RECORD_TAGS if key in self.tags}

    def is_bake(self) -> bool:
        """Whether it is a baked image (``xce:kind=image``)."""
        return self.tags.get(KIND) == KIND_IMAGE

    def owned_by(self, cluster: str, provider: str) -> bool:
        """Whether its owner tags name this cluster and provider (what ``image delete`` requires)."""
        return self.tags.get(owner.CLUSTER) == cluster and self.tags.get(owner.PROVIDER) == provider

    def to_json(self) -> dict[str, Any]:
        """The ``image list --json`` entry."""
        return {
            "id": self.id,
            "name": self.name,
            "template": self.template,
            "provider": self.provider,
            "op_id": self.op_id,
            "created": self.created,
            "state": self.state,
            "built_from": self.records,
        }


def newest_bake(images: Iterable[BakedImage], cluster: str, provider: str, template: str) -> BakedImage | None:
    """The newest available bake of ``template`` on ``provider`` of this cluster (None: none).

    Newest by creation time, then id (clouds report RFC 3339 times, which sort as text).
    """
    mine = [
        image
        for image in images
        if image.is_bake() and image.owned_by(cluster, provider) and image.template == template
        if image.state in ("available", "")
    ]
    return max(mine, key=lambda i: (i.created, i.id), default=None)


def stale_records(image: BakedImage, today: BuiltFrom) -> dict[str, tuple[str, str]]:
    """The records of ``image`` that differ from what a bake would use today: tag → (then, now).

    A record whose value today is unknown (the base image of a template whose ``image:`` names
    the bake itself, an archive the configuration does not name) is not compared.
    """
    now = today.tags()
    then = image.records
    out: dict[str, tuple[str, str]] = {}
    for key in RECORD_TAGS:
        if key == BUILT_FROM_IMAGE and not today.base_image:
            continue
        if key == NODE_MANAGER_SHA256 and now[key] == NONE:
            continue
        if then.get(key, "") != now[key]:
            out[key] = (then.get(key, ""), now[key])
    return out


def with_template_image(config: Config, template: str, provider: str, image: str) -> Config:
    """``config`` with ``templates.<template>.providers.<provider>.image`` set to ``image`` (a
    copy): what a builder starts from, or ``bake:newest`` resolved to a concrete id."""
    tmpl = config.templates[template]
    side = tmpl.providers[provider].model_copy(update={"image": image})
    tmpl = tmpl.model_copy(update={"providers": {**tmpl.providers, provider: side}})
    return config.model_copy(update={"templates": {**config.templates, template: tmpl}})
