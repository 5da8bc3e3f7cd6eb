"""``xceprov image bake|list|delete``: baked images of host templates (docs/images.md).

A bake is one op of the executor (:mod:`orchestrator.ops.executor.bake`) under the provider's
lease; its play is the push bootstrap in the role's bake mode (``services/bootstrap.py``,
``bake=True``). The list reads shard 0's refresh-only plan (the module's ``tagged_images``
output) without a lease and without the controller. A delete is fenced as every mutation, and
refuses an image without this cluster's and provider's owner tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError, XceprovError
from orchestrator.model import tags as owner
from orchestrator.model.images import (
    BAKE_NEWEST,
    BUILT_FROM_IMAGE,
    BakedImage,
    BuiltFrom,
    newest_bake,
    stale_records,
)
from orchestrator.model.instances import new_op_id
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.executor import BakeResult, Created, DeleteResult, OpParts, Wired, bake_module
from orchestrator.ops.facts import NoFacts
from orchestrator.ops.fence import ReadOnlyFence
from orchestrator.ops.hosts import NoHosts
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.image_records import built_from
from orchestrator.services.ops import fenced_session, refuse_when_leased
from orchestrator.workspace.cloudview import read_listing
from orchestrator.workspace.terraform import engine_for, ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


def provider_images(ops: Wired, provider: str) -> list[BakedImage]:
    """The cluster's tagged images of ``provider`` (shard 0's listing, through the executor's
    reads and the engine of its parts), oldest first."""
    shard = ops.executor.workdir(provider)
    with shard.lock():
        ops.executor.listable(shard)
    listing = read_listing(ops.parts.engine, shard.path, shard.labels)
    return [i for i in listing.images if owner.of_provider(i.tags, provider)]


def _checked(loaded: LoadedConfig, template: str, provider: str) -> None:
    config = loaded.config
    if provider not in config.providers:
        raise UsageError(f"--provider {provider}: no such provider in {loaded.source}")
    tmpl = config.templates.get(template)
    if tmpl is None:
        raise UsageError(f"template {template!r}: no such template in {loaded.source}")
    if provider not in tmpl.providers:
        raise UsageError(f"templates.{template}.providers: no entry for provider {provider!r}")
    bake_module(config.providers[provider].module, provider)


def base_image(ops: Wired, template: str, provider: str, given: str | None) -> str:
    """What the builder starts from: ``--from``, else the template's image; for ``bake:newest``
    the base image the newest bake was built from (a first bake needs ``--from``)."""
    if given:
        return given
    config = ops.parts.config
    image = config.templates[template].providers[provider].image
    if image != BAKE_NEWEST:
        return image
    newest = newest_bake(provider_images(ops, provider), config.cluster, provider, template)
    base = newest.records.get(BUILT_FROM_IMAGE, "") if newest is not None else ""
    if not base or base == "none":
        raise UsageError(
            f"templates.{template}.providers.{provider}.image: {BAKE_NEWEST} and no bake records its base image; "
            "name the base image: xceprov image bake --from IMAGE"
        )
    return base


def bake_image(
    loaded: LoadedConfig,
    toolkit_root: Path,
    template: str,
    provider: str,
    *,
    base: str | None = None,
    op_id: str | None = None,
    engine: Engine | None = None,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
) -> BakeResult:
    """Bake an image of ``template`` on ``provider`` (see the module docstring)."""
    from orchestrator.services.bootstrap import bootstrap as run_play

    _checked(loaded, template, provider)
    config = loaded.config
    engine = engine or engine_for(config)
    refuse_when_leased(loaded, [provider])
    op_id = op_id or new_op_id()

    def run(prov: str, builder: Created) -> str:
        result = run_play(
            loaded,
            toolkit_root,
            hosts=[builder.name],
            world=world,
            progress=progress,
            scope=f"{prov} {op_id}",
            bake=True,
        )
        host = result.hosts.get(builder.name)
        if host is None:
            return "failed: the play reported nothing for the builder"
        return host.status + (f": {host.message}" if host.message else "")

    with fenced_session(loaded, [provider], toolkit_root, engine=engine, progress=progress) as ops:
        start = base_image(ops, template, provider, base)
        records = built_from(loaded, toolkit_root, template, start, world)
        return ops.executor.bake(provider, template, op_id, records, run)


def list_images(
    loaded: LoadedConfig, toolkit_root: Path, provider: str | None = None, engine: Engine | None = None
) -> list[BakedImage]:
    """The cluster's baked images (every provider whose module makes images, or ``provider``)."""
    config = loaded.config
    if provider is not None and provider not in config.providers:
        raise UsageError(f"--provider {provider}: no such provider in {loaded.source}")
    if provider is not None:
        bake_module(config.providers[provider].module, provider)  # refused before anything is read
    wanted = [provider] if provider else [name for name in sorted(config.providers) if _bakes(loaded, name)]
    # A read of the cloud alone: no lease, no controller (the images' records are their tags).
    engine = engine or engine_for(config)
    reader = Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), NoFacts(), NoHosts()))
    return [image for name in wanted for image in provider_images(reader, name)]


def _bakes(loaded: LoadedConfig, provider: str) -> bool:
    try:
        bake_module(loaded.config.providers[provider].module, provider)
    except UsageError:
        return False
    return True


def delete_image(
    loaded: LoadedConfig,
    toolkit_root: Path,
    image_id: str,
    provider: str,
    *,
    dry_run: bool = False,
    engine: Engine | None = None,
    progress: ProgressSink | None = None,
) -> DeleteResult:
    """Delete baked image ``image_id`` of ``provider`` under the lease (``dry_run``: plan only)."""
    config = loaded.config
    if provider not in config.providers:
        raise UsageError(f"--provider {provider}: no such provider in {loaded.source}")
    bake_module(config.providers[provider].module, provider)
    engine = engine or engine_for(config)
    refuse_when_leased(loaded, [provider])
    with fenced_session(loaded, [provider], toolkit_root, engine=engine, progress=progress) as ops:
        found = [i for i in provider_images(ops, provider) if i.id == image_id]
        if not found:
            raise UsageError(
                f"image {image_id}: not among the images tagged for cluster {config.cluster} on provider {provider}; "
                "refused, nothing deleted"
            )
        return ops.executor.delete_image(provider, found[0], new_op_id(), dry_run)


def stale_image_warnings(
    loaded: LoadedConfig, toolkit_root: Path, engine: Engine, world: SimulatedWorld | None = None
) -> list[str]:
    """One line per template whose baked image is older than what a bake would make today (its
    records differ from today's, :func:`~orchestrator.model.images.stale_records`).

    Only providers used before (a desired set exists: a bake of this cluster keeps its image
    there) are read: one refresh-only plan of shard 0 each, a cloud read that changes nothing. A
    listing that cannot be read is a warning too, never a failure.
    """
    config = loaded.config
    out: list[str] = []
    for provider in sorted(config.providers):
        templates = sorted(t for t, tm in config.templates.items() if provider in tm.providers)
        workdir = ProviderWorkdir(config, provider, toolkit_root)
        if not templates or not _bakes(loaded, provider) or not workdir.desired.exists():
            continue
        try:
            ready_workdir(engine, workdir)
            with workdir.lock():
                images = read_listing(engine, workdir.path, workdir.labels).images
        except XceprovError as exc:
            out.append(
                f"provider {provider}: baked images not checked: {str(exc).splitlines()[0] if str(exc) else exc}"
            )
            continue
        by_id = {i.id: i for i in images}
        for template in templates:
            named = config.templates[template].providers[provider].image
            image = (
                newest_bake(images, config.cluster, provider, template) if named == BAKE_NEWEST else by_id.get(named)
            )
            if image is None or not image.is_bake():
                continue
            # The template's image names the bake itself: its base image is not compared.
            today = built_from(loaded, toolkit_root, template, "", world)
            for key, (then, now) in stale_records(image, today).items():
                out.append(
                    f"templates.{template}.providers.{provider}.image: {named} ({image.id}) is older than what a bake "
                    f"would make today: {key} {then or '(none)'}, now {now}; xceprov image bake {template} "
                    f"--provider {provider}"
                )
    return out


def image_rows(images: Sequence[BakedImage]) -> list[list[str]]:
    """The table of ``image list``: id, template, provider, created, state, built from."""
    return [
        [i.id, i.template, i.provider, i.created, i.state, " ".join(f"{k}={v}" for k, v in i.records.items())]
        for i in images
    ]


__all__ = ["BuiltFrom", "bake_image", "delete_image", "image_rows", "list_images", "provider_images"]
