"""``xceprov return HOST...``: drain hosts, then give them back (audited, under the lease)."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.durations import parse_duration
from orchestrator.model.text import printable


@click.command("return")
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@click.option("--drain-timeout", metavar="DURATION", help="Wait at most this long for work to finish (e.g. 10m).")
@click.option("--now", is_flag=True, help="Close the hosts and return them without waiting for their work.")
@pass_ctx
def return_(ctx: CliContext, hosts: tuple[str, ...], drain_timeout: str | None, now: bool) -> None:
    """Drain and return HOST... (host names or instance keys).

    Progress (plan, decommission, apply) goes to stderr while it runs; one line per host at the end.
    """
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.cli.progress import progress_view
    from orchestrator.errors import UsageError
    from orchestrator.paths import toolkit_root
    from orchestrator.services.ret import return_hosts

    timeout: float | None = None
    if drain_timeout is not None:
        try:
            timeout = parse_duration(drain_timeout)
        except ValueError as exc:
            raise UsageError(f"--drain-timeout {drain_timeout}: {exc}") from None
    with progress_view(ctx.verbose) as view:
        results = return_hosts(
            ctx.config(),
            toolkit_root(),
            list(hosts),
            drain_timeout=timeout,
            now=now,
            world=simulated_world(),
            progress=view,
        )
    for result in results:
        drained = f", drained {len(result.drained)}" if result.drained else ""
        click.echo(f"{result.provider}: op {result.op_id}: returned {len(result.keys)} instances{drained}")
        for key in result.keys:
            click.echo(printable(f"  {key}  {result.names.get(key, '')}"))
