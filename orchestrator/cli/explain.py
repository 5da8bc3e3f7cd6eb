"""``xceprov explain [TEMPLATE] [--json] [--since WHEN]``: why hosts were or were not launched."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("explain")
@click.argument("template", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.option("--since", metavar="WHEN", help="Only the history since WHEN (a Unix time, or 30m, 2h: ago).")
@pass_ctx
def explain(ctx: CliContext, template: str | None, as_json: bool, since: str | None) -> None:
    """Show why the daemon launched hosts, or held them back, per template: the reasons of its
    last pass and their recent history (reason codes: docs/daemon.md, "Why nothing launched").
    """
    import time

    from orchestrator.errors import UsageError
    from orchestrator.model.durations import since_time
    from orchestrator.services.explain import explain as explain_reasons

    start: float | None = None
    if since is not None:
        try:
            start = since_time(since, time.time())
        except ValueError as exc:
            raise UsageError(f"--since {since}: {exc}") from exc
    found = explain_reasons(ctx.config(), template, start)
    click.echo(json.dumps(found.to_json(), indent=2, sort_keys=True) if as_json else found.text())
