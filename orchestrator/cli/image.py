"""``xceprov image bake|list|delete``: baked images of host templates (docs/images.md)."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.text import printable


@click.group("image")
def image() -> None:
    """Baked images: a template's software installed once, hosts started from it (docs/images.md)."""


@image.command("bake")
@click.argument("template")
@click.option("--provider", metavar="PROVIDER", required=True, help="The provider whose cloud makes the image.")
@click.option(
    "--from",
    "base",
    metavar="IMAGE",
    default=None,
    help="Start the builder from IMAGE (default: the template's image; with bake:newest, the newest bake's base).",
)
@click.option(
    "--op-id", metavar="OP", default=None, help="The op id (a second run with the same id makes nothing new)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the image id and its records as JSON.")
@pass_ctx
def bake(ctx: CliContext, template: str, provider: str, base: str | None, op_id: str | None, as_json: bool) -> None:
    """Bake an image of TEMPLATE on PROVIDER: a builder instance, the bake play on it, the image, the
    builder returned (always, also when the play fails). Under the provider's lease, audited.

    Progress goes to stderr; the image id to stdout.
    """
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.cli.progress import progress_view
    from orchestrator.paths import toolkit_root
    from orchestrator.services.images import bake_image

    with progress_view(ctx.verbose) as view:
        result = bake_image(
            ctx.config(),
            toolkit_root(),
            template,
            provider,
            base=base,
            op_id=op_id,
            world=simulated_world(),
            progress=view,
        )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
        return
    click.echo(printable(result.image_id))


@image.command("list")
@click.option("--provider", metavar="PROVIDER", default=None, help="Only this provider's images.")
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON.")
@pass_ctx
def list_(ctx: CliContext, provider: str | None, as_json: bool) -> None:
    """List the cluster's baked images: id, template, provider, created, state, what each was built from."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.images import image_rows, list_images

    images = list_images(ctx.config(), toolkit_root(), provider)
    if as_json:
        click.echo(json.dumps([i.to_json() for i in images], indent=2, sort_keys=True))
        return
    for row in image_rows(images):
        click.echo(printable("  ".join(row)))


@image.command("delete")
@click.argument("image_id", metavar="ID")
@click.option("--provider", metavar="PROVIDER", required=True, help="The provider holding the image.")
@click.option("--dry-run", is_flag=True, help="Plan and check the deletion, change nothing.")
@pass_ctx
def delete(ctx: CliContext, image_id: str, provider: str, dry_run: bool) -> None:
    """Delete baked image ID of this cluster (under the lease, intent first, audited). An image
    without this cluster's and provider's owner tags is refused."""
    from orchestrator.cli.progress import progress_view
    from orchestrator.paths import toolkit_root
    from orchestrator.services.images import delete_image

    with progress_view(ctx.verbose) as view:
        result = delete_image(ctx.config(), toolkit_root(), image_id, provider, dry_run=dry_run, progress=view)
    verb = "would delete" if dry_run else "deleted"
    click.echo(printable(f"{provider}: op {result.op_id}: {verb} image {result.image_id} ({result.image_key})"))
