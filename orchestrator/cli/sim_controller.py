"""``xceprov sim failover|submit``: drive the running simulated controller.

The controller is started only by ``xceprov sim up`` (``--only controller`` for it alone), so
``sim status`` and ``sim down`` always see it. It is reached through its admin channel, the Unix
socket ``<sim_state_dir>/controller.sock`` (docs/protocol.md §9).
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.errors import UsageError
from orchestrator.model.durations import parse_duration
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


def register(group: click.Group) -> None:
    """Add these commands to ``xceprov sim``."""
    for cmd in (failover, submit):
        group.add_command(cmd)
