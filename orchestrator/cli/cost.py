"""``xceprov cost [--since WHEN] [--until WHEN] [--by provider|template|group|op] [--json] [--plot FILE]``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.costs import BY
from orchestrator.model.text import printable


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
@click.option(
    "--plot",
    metavar="FILE",
    type=click.Path(path_type=Path),  # checked by check_chart_path, in one line
    help="Also write a chart of the spend over time by --by to FILE (.png or .svg).",
)
@pass_ctx
def cost(ctx: CliContext, since: str | None, until: str | None, by: str, as_json: bool, plot: Path | None) -> None:
    """Show what bursting cost: each instance from the cloud's launch time to its return or loss,
    at its offering's price, totalled by provider, template, host group or op (docs/cost.md)."""
    from orchestrator.model.durations import period_of
    from orchestrator.services.cost import cost_report

    if plot is not None:  # a bad --plot is refused before the controller is asked
        from orchestrator.charts import check_chart_path

        check_chart_path(plot)
    start, end = period_of(since, until)
    found = cost_report(ctx.config(), start, end, by)
    if plot is not None:
        from orchestrator.charts import write_cost_chart

        write_cost_chart(found.items, plot, start, end, by)
        click.echo(f"xceprov: wrote the chart of the spend by {by} to {printable(str(plot))}", err=True)
    click.echo(json.dumps(found.to_json(), indent=2, sort_keys=True) if as_json else found.text())
