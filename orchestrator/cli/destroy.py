"""``xceprov destroy``: return instances the toolkit made (exact, dry-runnable, capped, audited)."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.text import printable


@click.command("destroy")
@click.option("--op", "ops", multiple=True, metavar="OP", help="Destroy the instances of this op (repeatable).")
@click.option(
    "--all", "all_instances", is_flag=True, help="Destroy every instance of the provider(s), and their baked images."
)
@click.option("--provider", metavar="PROVIDER", help="Only this provider.")
@click.option("--dry-run", is_flag=True, help="Plan the removal and show it; change nothing.")
@click.option(
    "--max",
    "max_destroy",
    type=click.IntRange(min=1),
    metavar="N",
    default=50,
    show_default=True,
    help="Refuse when Terraform would delete more instances than this in one run.",
)
@click.option("--force", is_flag=True, help="Also destroy hosts that joined and run work (audited).")
@pass_ctx
def destroy(
    ctx: CliContext,
    ops: tuple[str, ...],
    all_instances: bool,
    provider: str | None,
    dry_run: bool,
    max_destroy: int,
    force: bool,
) -> None:
    """Destroy instances by op or all of them; only what this toolkit made in this cluster.

    Progress (plan, apply, decommission) goes to stderr while it runs; one line per instance at the end.
    """
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.cli.progress import progress_view
    from orchestrator.paths import toolkit_root
    from orchestrator.services.destroy import destroy as destroy_service

    with progress_view(ctx.verbose) as view:
        result = destroy_service(
            ctx.config(),
            toolkit_root(),
            ops=ops,
            all_instances=all_instances,
            provider=provider,
            dry_run=dry_run,
            max_destroy=max_destroy,
            force=force,
            world=simulated_world(),
            progress=view,
        )
    verb = "would destroy" if result.dry_run else "destroyed"
    if not result.removed and not result.images:
        click.echo("nothing to destroy")
    for provider_name, keys in sorted(result.removed.items()):
        deletes = result.deletes.get(provider_name, [])
        click.echo(f"{provider_name}: {verb} {len(keys)} instances (Terraform deletes {len(deletes)})")
        for key in keys:
            click.echo(printable(f"  {key}  {result.names.get(key, '')}"))
    for provider_name, ids in sorted(result.images.items()):
        click.echo(f"{provider_name}: {verb} {len(ids)} baked images")
        for image_id in ids:
            click.echo(printable(f"  {image_id}"))
