"""``xceprov status [--json]``: the controller link, leases, demand against supply, open ops."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_ctx
def status(ctx: CliContext, as_json: bool) -> None:
    """Show the controller link, the lease of each provider, demand against supply and open ops."""
    from orchestrator.services.status import collect_status, render_text

    loaded = ctx.config()
    report = collect_status(loaded)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(render_text(report, sorted(loaded.config.providers)))
