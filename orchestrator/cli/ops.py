"""``xceprov ops [--json]``, ``ops resume``, ``ops hand-over``: open ops, their explicit completion,
and a provider handed from the controller to standalone commands."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.text import printable


@click.group("ops", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the open ops as JSON.")
@click.pass_context
def ops(click_ctx: click.Context, as_json: bool) -> None:
    """List open ops: an intent at the controller without its outcome (takes no lease)."""
    if click_ctx.invoked_subcommand is not None:
        return
    from orchestrator.paths import toolkit_root
    from orchestrator.services.ops import list_ops

    ctx = click_ctx.find_object(CliContext)
    assert ctx is not None
    report = list_ops(ctx.config(), toolkit_root())
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    for provider in report.providers:
        if not provider["open"] and not provider["untracked"]:
            click.echo(f"{provider['provider']}: no open ops")
        for op in provider["open"]:
            click.echo(
                printable(
                    f"{provider['provider']}: {op['op_id']}  {op['kind']}  {op['template']}  "
                    f"{op['done']}/{op['count']} done  epoch {op['epoch']}  pending {' '.join(op['pending'])}"
                )
            )
        for item in provider["untracked"]:
            click.echo(printable(f"{provider['provider']}: untracked {item} (no fact; the orphan scan decides)"))
        if provider["busy"]:
            click.echo(
                printable(
                    f"{provider['provider']}: {' '.join(provider['busy'])} not read: an op is applying there "
                    "(untracked keys of it are not shown)"
                )
            )


@ops.command("hand-over")
@click.argument("providers", nargs=-1, required=True, metavar="PROVIDER...")
@pass_ctx
def hand_over(ctx: CliContext, providers: tuple[str, ...]) -> None:
    """Hand PROVIDER... from the controller to standalone commands (standalone: true, backend pg):
    for a cluster whose controller is gone for good (docs/scale-out.md, "Without a controller")."""
    from orchestrator.services.ops import hand_over as hand

    for provider, epoch in hand(ctx.config(), providers):
        if epoch is None:
            click.echo(printable(f"{provider}: no controller epoch on it: standalone commands were not refused"))
        else:
            click.echo(
                printable(
                    f"{provider}: handed over: the controller's epoch {epoch} refuses standalone commands no more"
                )
            )


@ops.command("resume")
@pass_ctx
def resume(ctx: CliContext) -> None:
    """Complete or abandon every open op, each with an audited reason."""
    from orchestrator.paths import toolkit_root
    from orchestrator.services.ops import resume_ops

    done = resume_ops(ctx.config(), toolkit_root())
    if not done:
        click.echo("no open ops")
    for item in done:
        click.echo(printable(f"{item.provider}: {item.op_id} ({item.kind}): {item.outcome}: {item.reason}"))
