"""``xceprov terraform``: the site's Terraform itself (``lock``: pin provider versions)."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.group("terraform")
def terraform() -> None:
    """The site's Terraform: provider versions pinned in lock files."""


@terraform.command("lock")
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    metavar="OS_ARCH",
    help="Also lock the checksums of this platform (linux_arm64, ...); repeatable. Default: this machine's.",
)
@click.option("--upgrade", is_flag=True, help="Select the newest versions allowed again and say which moved.")
@pass_ctx
def lock(ctx: CliContext, platforms: tuple[str, ...], upgrade: bool) -> None:
    """Write the provider lock of every provider root the site uses (kept versions unless --upgrade)."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.terraform_lock import lock_site

    report = lock_site(ctx.config(), toolkit_root(), platforms, upgrade)
    for line in report.locked:
        click.echo(f"locked: {line}")
    for line in report.moved:
        click.echo(f"moved: {line}")
    for path in report.written:
        click.echo(f"wrote {path}")
