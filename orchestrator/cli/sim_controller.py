"""``xceprov sim failover|submit|controller status``: drive and read the running simulated controller.

The controller is started only by ``xceprov sim up`` (``--only controller`` for it alone), so
``sim status`` and ``sim down`` always see it. It is reached through its admin channel, the Unix
socket ``<sim_state_dir>/controller.sock`` (docs/protocol.md §9).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.errors import UsageError
from orchestrator.model.durations import parse_duration
from orchestrator.model.text import printable
from orchestrator.sim.controller import admin


def _state_dir(ctx: CliContext) -> Path:
    return ctx.config().config.sim_state_dir().resolve()


@click.command("failover")
@pass_ctx
def failover(ctx: CliContext) -> None:
    """Simulate a controller failover: bump the term, drop every connection."""
    click.echo(admin.failover(_state_dir(ctx)).message)


@click.command("submit")
@click.option("--template", "-t", required=True, metavar="TEMPLATE", help="Host template the work needs.")
@click.option("--hosts", "-n", type=click.IntRange(min=1), required=True, metavar="N", help="Hosts the work needs.")
@click.option("--duration", "-d", metavar="DURATION", default="60s", show_default=True, help="How long the work runs.")
@pass_ctx
def submit(ctx: CliContext, template: str, hosts: int, duration: str) -> None:
    """Add pending work to the simulated controller's workload."""
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    click.echo(admin.submit(_state_dir(ctx), template, hosts, seconds).message)


@click.group("controller")
def controller() -> None:
    """The running simulated controller."""


@controller.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_ctx
def controller_status(ctx: CliContext, as_json: bool) -> None:
    """Show the simulated controller's term, leases, demand and the reasons its provisioners
    reported per template (why hosts are or are not on their way)."""
    import json

    found = admin.status(_state_dir(ctx))
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    click.echo(status_text(found))


def status_text(found: dict[str, Any]) -> str:
    """``sim controller status`` as text."""
    lines = [f"controller {found['controller_id']}  term {found['term']}  connections {found['connections']}"]
    lines.append(f"work: {found['pending_work']} pending, {found['running_work']} running")
    for lease in found["leases"]:
        lines.append(f"lease {lease['provider']}: {lease['holder'] or '-'} (expires in {lease['expires_in']:.1f}s)")
    for row in found["demand"]["templates"]:
        lines.append(f"demand {row['template']}: {row['wanted']} wanted, {row['in_flight']} in flight")
    for reason in found["reasons"]:
        lines.append(f"reason {reason['template']}: {reason['code']}: {reason['detail']}")
    return "\n".join(printable(line) for line in lines)


def register(group: click.Group) -> None:
    """Add these commands to ``xceprov sim``."""
    for cmd in (failover, submit, controller):
        group.add_command(cmd)
