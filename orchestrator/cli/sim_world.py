"""``xceprov sim up|down|status`` and ``xceprov sim hosts list|ssh-config``.

The click layer only parses options and prints; ``orchestrator.sim.world`` does the work.
"""

from __future__ import annotations

import json
from typing import Any

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.sim import world
from orchestrator.sim.hosts.keys import KnownHost, render_ssh_config


def _settings(ctx: CliContext, **explicit: Any) -> world.WorldSettings:
    config = ctx.config().config
    return world.settings_for(config.sim_state_dir(), configured_addresses=config.controller.addresses, **explicit)


def _print_status(st: world.WorldStatus, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2))
        return
    lab = st.lab
    click.echo(f"simulated world: {st.state_dir}")
    click.echo(
        f"lab {lab.name}: {lab.subnet}, gateway {lab.gateway} on {lab.gateway_if} ({'up' if st.lab_up else 'down'})"
    )
    for c in st.components:
        pid = f"pid {c.pid}" if c.pid else ""
        extra = ", ".join(c.addresses) or c.detail
        click.echo(f"  {c.name:<13} {c.state:<11} {pid:<11} {extra}".rstrip())
    _print_hosts(st.hosts)


def _print_hosts(hosts: list[dict[str, Any]]) -> None:
    click.echo(f"hosts: {len(hosts)}")
    for h in hosts:
        ready = f"{h['ready_after']:.2f}s" if h.get("ready_after") is not None else ""
        line = (
            f"  {h['id']:<16} {h.get('name', ''):<20} {h.get('address', ''):<15} "
            f"{h['state']:<8} {ready} {h.get('error', '')}"
        )
        click.echo(line.rstrip())


@click.command("up")
# Also from the environment, as `xceprov init --lab-subnet` takes it: a second world's commands
# are then the quickstart's as written (docs/simulated-world.md, "Two worlds on one machine").
@click.option(
    "--lab-name",
    metavar="LAB",
    envvar="XCEPROV_LAB_NAME",
    help="Lab name (a-z0-9, at most 8); default xce, or $XCEPROV_LAB_NAME. For parallel worlds.",
)
@click.option(
    "--lab-subnet",
    metavar="CIDR",
    envvar="XCEPROV_LAB_SUBNET",
    help=(
        "Lab subnet inside 10.213.0.0/16 (the cloud's addresses come from it); default 10.213.0.0/16, "
        "or $XCEPROV_LAB_SUBNET."
    ),
)
@click.option(
    "--controller-port",
    type=int,
    metavar="PORT",
    help="Simulated controller port; default: that of controller.addresses on 127.0.0.1, else 7441.",
)
@click.option("--only", type=click.Choice(world.COMPONENTS), help="Start this component alone.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_ctx
def up(
    ctx: CliContext,
    lab_name: str | None,
    lab_subnet: str | None,
    controller_port: int | None,
    only: str | None,
    as_json: bool,
) -> None:
    """Start the simulated world (idempotent): host manager (root) and controller."""
    settings = _settings(ctx, lab_name=lab_name, lab_subnet=lab_subnet, controller_port=controller_port)
    st = world.up(settings, only)
    warning = world.lab_unreachable(settings, ctx.config().config.controller.worker_addresses)
    if warning and st.component(world.HOST_MANAGER).state == "running":
        click.echo(f"xceprov: warning: {warning}", err=True)
    hm = st.component(world.HOST_MANAGER)
    if hm.state == "unavailable" and not as_json:
        click.echo(f"xceprov: simulated hosts unavailable: {hm.detail}", err=True)
    _print_status(st, as_json)


@click.command("down")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_ctx
def down(ctx: CliContext, as_json: bool) -> None:
    """Stop the simulated world; no process, namespace, mount or veth of it remains."""
    _print_status(world.down(_settings(ctx)), as_json)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_ctx
def status(ctx: CliContext, as_json: bool) -> None:
    """Show each component of the simulated world and its hosts."""
    _print_status(world.status(_settings(ctx)), as_json)


@click.group("hosts")
def hosts() -> None:
    """Simulated hosts (one per running instance of the simulated cloud)."""


@hosts.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the hosts as JSON.")
@pass_ctx
def hosts_list(ctx: CliContext, as_json: bool) -> None:
    """List the simulated hosts and their state (booting, ready, failed, skipped)."""
    st = world.status(_settings(ctx))
    if as_json:
        click.echo(json.dumps(st.hosts, indent=2))
    else:
        _print_hosts(st.hosts)


@hosts.command("ssh-config")
@pass_ctx
def hosts_ssh_config(ctx: CliContext) -> None:
    """Print an ssh_config that reaches every live host by name or address (ssh -F FILE NAME)."""
    st = world.status(_settings(ctx))
    live = [
        KnownHost(str(h["name"]), str(h["address"]), "")
        for h in st.hosts
        if h.get("address") and h.get("state") in ("ready", "booting")
    ]
    click.echo(render_ssh_config(st.state_dir, live), nl=False)


def register(group: click.Group) -> None:
    """Add the verbs of this module to the ``sim`` group."""
    for command in (up, down, status, hosts):
        group.add_command(command)
