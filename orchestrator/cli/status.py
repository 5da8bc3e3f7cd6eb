"""``xceprov status [--json]``: the controller link, leases, demand against supply, open ops."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_ctx
def status(ctx: CliContext, as_json: bool) -> None:
    """Show the controller link, the lease of each provider, demand against supply and open ops.

    With no controller reachable: the daemon and the breakers (local state), with a shared store
    who holds what by its members, then the error (exit code 75).
    """
    from orchestrator.errors import ControllerError
    from orchestrator.services.status import collect_status, offline_json, offline_state
    from orchestrator.services.status_text import render_offline, render_text

    loaded = ctx.config()
    try:
        report = collect_status(loaded)
    except ControllerError as exc:
        # Without a controller the local files still answer "is my daemon alive, is a breaker
        # open?"; the exit code and the one-line error on stderr still say the report is partial.
        local = offline_state(loaded)
        line = (str(exc).splitlines() or ["unreachable"])[0]
        providers = sorted(loaded.config.providers)
        click.echo(
            json.dumps(offline_json(line, local), indent=2, sort_keys=True)
            if as_json
            else render_offline(line, local, providers)
        )
        raise
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(render_text(report, sorted(loaded.config.providers)))
