"""``bake:newest``: a template's image resolved to its newest bake before rendering (docs/images.md).

A template names its baked image in its provider block (``image:``) by id, or by the reference
``bake:newest``: the newest available image baked for that template on that provider, read from
the provider's tagged image listing (shard 0's refresh-only plan, the module's
``tagged_images``). Every render of an op resolves it first (the executor's create, the plan
preview), so plans and saved bundles show the concrete id, never the reference.
"""

from __future__ import annotations

from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.images import BAKE_NEWEST, newest_bake, with_template_image
from orchestrator.workspace.cloudview import read_listing
from orchestrator.workspace.terraform import ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


def wants_newest(config: Config, template: str, provider: str) -> bool:
    """Whether ``template`` names ``bake:newest`` as its image on ``provider``."""
    side = config.templates.get(template)
    entry = side.providers.get(provider) if side is not None else None
    return entry is not None and entry.image == BAKE_NEWEST


def resolve_baked(config: Config, engine: Engine, shard0: ProviderWorkdir, template: str) -> Config:
    """``config`` with ``bake:newest`` of ``template`` on ``shard0``'s provider replaced by the
    newest bake's id (``config`` itself when the template names a concrete image); a one-line
    refusal when no bake exists. Takes shard 0's lock for its read (the caller must not hold it).
    """
    provider = shard0.provider
    if not wants_newest(config, template, provider):
        return config
    images = []
    if shard0.desired.path.is_file() or shard0.desired.exists():
        ready_workdir(engine, shard0)
        with shard0.lock():
            images = read_listing(engine, shard0.path, shard0.labels).images
    newest = newest_bake(images, config.cluster, provider, template)
    if newest is None:
        raise UsageError(
            f"templates.{template}.providers.{provider}.image: {BAKE_NEWEST}, but no bake of template {template} "
            f"exists on provider {provider} (xceprov image bake {template} --provider {provider})"
        )
    return with_template_image(config, template, provider, newest.id)
