"""``xceprov apply BUNDLE``: apply a saved burst plan exactly, or refuse if the state moved."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("apply")
@click.argument("bundle", type=click.Path(path_type=Path))
@pass_ctx
def apply(ctx: CliContext, bundle: Path) -> None:
    """Apply the plans saved by `xceprov plan --out BUNDLE` (audited)."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.apply import apply_bundle

    for provider in apply_bundle(ctx.config(), bundle, toolkit_root()):
        click.echo(f"{provider.name}: {len(provider.instances)} instances")
        for key, inst in sorted(provider.instances.items()):
            click.echo(f"  {key}  {inst.get('id', '?')}  {inst.get('name', '?')}  {inst.get('address', '')}")
