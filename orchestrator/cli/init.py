"""``xceprov init [DIR]``: write a commented starting ``xceprov.yaml`` (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.services.init import STARTERS


@click.command("init")
@click.argument("directory", metavar="DIR", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--provider",
    type=click.Choice(sorted(STARTERS)),
    default="sim",
    show_default=True,
    help="The starting file: the simulated world's (it runs as written), or a real provider's skeleton.",
)
def init(directory: Path, provider: str) -> None:
    """Write a commented starting DIR/xceprov.yaml (default DIR: here); never overwrite one."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.init import write_starting_config

    written = write_starting_config(directory, provider)
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
