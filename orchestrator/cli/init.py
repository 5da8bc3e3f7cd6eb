"""``xceprov init [DIR]``: write a commented starting ``xceprov.yaml`` (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from orchestrator.errors import UsageError
from orchestrator.services.init import STARTERS, SimWorld

# The simulated world's controller port and lab, also from the environment: exported once, they
# reach `init` and `sim up` alike, so a second world's commands are the quickstart's as written.
PORT_VAR = "XCEPROV_CONTROLLER_PORT"
SUBNET_VAR = "XCEPROV_LAB_SUBNET"


def _sim_world(ctx: click.Context, provider: str, port: int | None, subnet: str | None) -> SimWorld | None:
    """Where the simulated world's controller goes, or None for the built-in place."""
    if port is None and subnet is None:
        return None
    if provider != "sim":
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("controller_port", "lab_subnet")
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
        ]
        if given:
            raise UsageError(f"{' and '.join(given)}: only for the simulated world's file (--provider sim)")
        return None  # from the environment: meant for the simulated world, not for this skeleton
    from orchestrator.sim.hosts import lab as labnet  # the lab's rules: inside 10.213.0.0/16

    world = SimWorld()
    gateway = labnet.LabConfig.parse(labnet.DEFAULT_LAB_NAME, subnet).gateway if subnet else world.lab_gateway
    return SimWorld(controller_port=port or world.controller_port, lab_gateway=str(gateway))


@click.command("init")
@click.argument("directory", metavar="DIR", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--provider",
    type=click.Choice(sorted(STARTERS)),
    default="sim",
    show_default=True,
    help="The starting file: the simulated world's (it runs as written), or a real provider's skeleton.",
)
@click.option(
    "--controller-port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    envvar=PORT_VAR,
    help=(
        f"The simulated controller's port, in controller.addresses and worker_addresses (default 7441, or ${PORT_VAR})."
    ),
)
@click.option(
    "--lab-subnet",
    metavar="CIDR",
    envvar=SUBNET_VAR,
    help=(
        "The simulated lab whose gateway the hosts reach the controller at, as sim up --lab-subnet "
        f"(default 10.213.0.0/16, or ${SUBNET_VAR})."
    ),
)
@click.pass_context
def init(
    ctx: click.Context, directory: Path, provider: str, controller_port: int | None, lab_subnet: str | None
) -> None:
    """Write a commented starting DIR/xceprov.yaml (default DIR: here); never overwrite one."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.init import write_starting_config

    written = write_starting_config(directory, provider, _sim_world(ctx, provider, controller_port, lab_subnet))
    click.echo(f"wrote {written.path}")
    # Installed from a wheel, the unit and the contract scripts are inside the package: say where.
    click.echo(f"the systemd unit and the provider-contract scripts: {toolkit_root() / 'contrib'}")
    if written.to_fill:
        # One key a line: the checklist of what the site fills in before anything runs.
        click.echo(
            f"fill in the {len(written.to_fill)} values marked CHANGE-ME (every verb refuses the file until then):"
        )
        for key in written.to_fill:
            click.echo(f"  {key}")
        click.echo(f"then: xceprov --config {written.path} validate")
    else:
        click.echo(f"next: cd {directory} && xceprov validate && xceprov sim up")
