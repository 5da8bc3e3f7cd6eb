"""``xceprov cost [--since WHEN] [--until WHEN] [--by provider|template|group|op] [--json]``."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.costs import BY


@click.command("cost")
@click.option("--since", metavar="WHEN", help="From WHEN (a Unix time, or 30m, 2h: ago); default: the beginning.")
@click.option("--until", metavar="WHEN", help="Up to WHEN (same forms); default: now.")
@click.option(
    "--by",
    type=click.Choice(BY),
    default="provider",
    show_default=True,
    help="Totals by provider, template, group or op.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the costs as JSON, with one item per instance.")
@pass_ctx
def cost(ctx: CliContext, since: str | None, until: str | None, by: str, as_json: bool) -> None:
    """Show what bursting cost: each instance from the cloud's launch time to its return or loss,
    at its offering's price, totalled by provider, template, host group or op (docs/cost.md)."""
    from orchestrator.model.durations import period_of
    from orchestrator.services.cost import cost_report

    start, end = period_of(since, until)
    found = cost_report(ctx.config(), start, end, by)
    click.echo(json.dumps(found.to_json(), indent=2, sort_keys=True) if as_json else found.text())
