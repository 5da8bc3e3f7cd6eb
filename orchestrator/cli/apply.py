"""``xceprov apply BUNDLE``: carry out a saved burst plan under the lease, or refuse."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("apply")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--bootstrap", is_flag=True, help="Run the bootstrap play on the new hosts as the op's last step.")
@pass_ctx
def apply(ctx: CliContext, bundle: Path, bootstrap: bool) -> None:
    """Apply the ops saved by `xceprov plan --out BUNDLE` (lease, intent facts, audited)."""
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.paths import toolkit_root
    from orchestrator.services.apply import apply_bundle

    applied = apply_bundle(ctx.config(), bundle, toolkit_root(), bootstrap=bootstrap, world=simulated_world())
    for provider in applied:
        for op in provider.ops:
            click.echo(f"{provider.name}: op {op.op_id}: {len(op.created)} {op.template} instances created")
            for host, outcome in sorted(op.bootstrap.items()):
                click.echo(f"  bootstrap {host}: {outcome}")
        click.echo(f"{provider.name}: {len(provider.instances)} instances")
        for key, inst in sorted(provider.instances.items()):
            click.echo(f"  {key}  {inst.get('id', '?')}  {inst.get('name', '?')}  {inst.get('address', '')}")
