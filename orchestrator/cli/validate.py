"""``xceprov validate``: configuration, templates, Terraform modules and playbooks."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.command("validate")
@click.option("-q", "--quiet", is_flag=True, help="Print problems only.")
@pass_ctx
def validate(ctx: CliContext, quiet: bool) -> None:
    """Check everything that can be checked without changing a cloud; one line per problem.

    Warns when a template's baked image is older than what a bake would make today (a read of
    the tagged image listing of each provider used before).

    Exits 3 when anything is wrong, 75 when the only problem is a provider registry that
    could not be reached (as plan does: retry, or set terraform.provider_mirror).
    """
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.paths import toolkit_root
    from orchestrator.services.validate import validate_all

    report = validate_all(ctx.config(), toolkit_root(), world=simulated_world())
    if not quiet:
        for item in report.checked:
            click.echo(f"ok: {item}")
    for item in report.warnings:
        click.echo(f"warning: {item}", err=True)
    error = report.error()  # exit 3, or 75 when only a provider registry could not be reached
    if error is not None:
        raise error
