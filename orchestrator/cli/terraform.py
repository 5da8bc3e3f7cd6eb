"""``xceprov terraform``: the site's Terraform itself (``lock``: pin provider versions;
``migrate-state``: local states into the pg backend; ``run``: Terraform in one shard, for debugging)."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.group("terraform")
def terraform() -> None:
    """The site's Terraform: provider versions pinned in lock files, states moved to the pg backend,
    Terraform run in one provider's working directory for debugging."""


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


@terraform.command("migrate-state")
@click.option("--dry-run", is_flag=True, help="List the local states that would move; change nothing.")
@pass_ctx
def migrate_state(ctx: CliContext, dry_run: bool) -> None:
    """Move every working directory's local Terraform state into the pg backend (terraform.backend: pg)."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.migrate_state import migrate_states

    report = migrate_states(ctx.config(), toolkit_root(), dry_run)
    verb = "would move" if report.dry_run else "moved"
    for move in report.moves:
        click.echo(
            f"{verb}: provider {move.provider} shard {move.index} ({move.path}) -> schema {move.schema}: "
            f"{move.instances} resource instances, serial {move.serial}, lineage {move.lineage}"
        )
    for name in report.documents:
        click.echo(f"copied: {name}")
    if not report.moves:
        click.echo("nothing to move: no working directory holds a local Terraform state")


@terraform.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--shard", type=click.IntRange(min=0), default=0, show_default=True, metavar="SHARD", help="The shard of PROVIDER."
)
@click.option(
    "--hold-lease",
    is_flag=True,
    help="Hold the provider's lease while state rm, state mv, taint or untaint runs (refused without it).",
)
@click.argument("provider")
@click.argument("args", nargs=-1, required=True, type=click.UNPROCESSED, metavar="TERRAFORM_ARGS...")
@pass_ctx
def run(ctx: CliContext, shard: int, hold_lease: bool, provider: str, args: tuple[str, ...]) -> None:
    """Run Terraform in PROVIDER's working directory with the toolkit's environment.

    Read-only at any time: state list, state show, show, output, validate, fmt (always -check
    -diff), providers, version. With --hold-lease: state rm, state mv, taint, untaint. Nothing
    else. Terraform's output is printed as it gave it (secrets hidden); a non-zero exit of
    Terraform exits 4. Example: xceprov terraform run sim state list
    """
    from orchestrator.paths import toolkit_root
    from orchestrator.services.terraform_run import run_terraform

    done = run_terraform(ctx.config(), toolkit_root(), provider, shard, args, hold_lease=hold_lease)
    click.echo(done.stdout, nl=False)
    click.echo(done.stderr, nl=False, err=True)
    failure = done.failure()
    if failure is not None:
        raise failure
