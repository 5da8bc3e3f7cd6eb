"""``xceprov apply BUNDLE``: carry out a saved burst plan under the lease, or refuse.

Progress (plan, apply, bootstrap per op) goes to stderr while it runs (``cli.progress``); at the
end, per op one summary line and one line per host (key, id, name, address, bootstrap outcome);
exit 1 when the bootstrap failed on a host, as ``xceprov bootstrap`` for the same outcome.
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.cli.conventions import QUIET_HELP
from orchestrator.model.text import printable


@click.command("apply")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option(
    "--bootstrap",
    is_flag=True,
    help="Run the bootstrap play on the new hosts as the op's last step (exit 1 if it fails on one).",
)
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@pass_ctx
def apply(ctx: CliContext, bundle: Path, bootstrap: bool, quiet: bool) -> None:
    """Apply the ops saved by `xceprov plan --out BUNDLE` (lease, intent facts, audited)."""
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.cli.progress import progress_view
    from orchestrator.paths import toolkit_root
    from orchestrator.services.apply import apply_bundle, bootstrap_failure

    with progress_view(ctx.verbose, quiet) as view:
        applied = apply_bundle(
            ctx.config(), bundle, toolkit_root(), bootstrap=bootstrap, world=simulated_world(), progress=view
        )
    for provider in applied:
        for op in provider.ops:
            click.echo(printable(f"{provider.name}: op {op.op_id}: {len(op.created)} {op.template} instances created"))
            for made in op.created:
                outcome = f"  bootstrap {op.bootstrap[made.name]}" if made.name in op.bootstrap else ""
                click.echo(
                    printable(f"  {made.key}  {made.instance_id}  {made.name}  {made.address}{outcome}".rstrip())
                )
        click.echo(f"{provider.name}: {len(provider.instances)} instances in all")
    if failure := bootstrap_failure(applied):
        raise failure
