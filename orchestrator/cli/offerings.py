"""``xceprov offerings [TEMPLATE]``: each template's offerings per provider, in the policy's order."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("offerings")
@click.argument("template", required=False)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Machine-readable output (docs/configuration.md, "Selecting flavors from the catalogue").',
)
@click.option("--refresh", is_flag=True, help="Read every catalogue now, whatever its age (catalogue_ttl).")
@pass_ctx
def offerings(ctx: CliContext, template: str | None, as_json: bool, refresh: bool) -> None:
    """List the offerings of TEMPLATE (default: every template) on each provider: the flavor,
    the listed offerings or what select: picks from the provider's flavor catalogue, cheapest
    per slot first, as the scale-out policy asks them."""
    from orchestrator.services.offerings import format_report, offerings_report

    doc = offerings_report(ctx.config(), template, refresh)
    click.echo(json.dumps(doc, indent=2) if as_json else format_report(doc))
