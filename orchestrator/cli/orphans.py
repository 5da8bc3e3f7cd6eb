"""``xceprov orphans [--provider P] [--json]``, ``xceprov orphans adopt|return ID [--dry-run] [--confirm]``."""

from __future__ import annotations

import json

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.text import printable


@click.group("orphans", invoke_without_command=True)
@click.option("--provider", metavar="PROVIDER", default=None, help="Scan only this provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (docs/orphans-json.md).")
@click.pass_context
def orphans(click_ctx: click.Context, provider: str | None, as_json: bool) -> None:
    """Report every resource the cloud's and the controller's views disagree on (changes nothing).

    Exits 11 when a view could not be read (the controller unreachable, a plan that failed):
    the report is printed, but classes were not scanned, so it is no all-clear.
    """
    if click_ctx.invoked_subcommand is not None:
        return
    from orchestrator.errors import ScanIncomplete
    from orchestrator.orphans.report import table
    from orchestrator.paths import toolkit_root
    from orchestrator.services.orphans import scan_orphans

    ctx = click_ctx.find_object(CliContext)
    assert ctx is not None
    report = scan_orphans(ctx.config(), toolkit_root(), provider=provider)
    click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True) if as_json else table(report))
    if not report.complete:
        raise ScanIncomplete(report.incomplete_line())


def _confirm(ctx: CliContext, ref: str, action: str, provider: str | None, dry_run: bool, waive: bool) -> None:
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.errors import FinalError
    from orchestrator.paths import toolkit_root
    from orchestrator.services.orphans import confirm_orphan

    finding = confirm_orphan(
        ctx.config(),
        toolkit_root(),
        ref,
        action,
        provider=provider,
        world=simulated_world(),
        dry_run=dry_run,
        waive_time=waive,
    )
    click.echo(
        printable(
            f"({finding.cls}) {finding.provider} {finding.object_id or finding.instance_key}: "
            f"{finding.action}: {finding.outcome}" + (f" ({finding.reason})" if finding.reason else "")
        )
    )
    if finding.outcome not in ("taken", "would-take"):
        raise FinalError(
            f"orphans {action} {ref}: not done{' (dry run)' if dry_run else ''}: {finding.reason or finding.outcome}"
        )


def _verb(action: str, doc: str) -> click.Command:
    @click.argument("ref", metavar="ID")
    @click.option(
        "--provider", metavar="PROVIDER", default=None, help="The finding's provider (default: every provider)."
    )
    @click.option(
        "--dry-run",
        is_flag=True,
        help="Judge every guard and say what would be done; change nothing (no lease, no fact, no cloud call).",
    )
    @click.option(
        "--confirm",
        "waive",
        is_flag=True,
        help="Waive the time guards (settle_window, orphan_grace) for this finding, audited with your user "
        "and uid; never the tags or the protect tag.",
    )
    @pass_ctx
    def command(ctx: CliContext, ref: str, provider: str | None, dry_run: bool, waive: bool) -> None:
        _confirm(ctx, ref, action, provider, dry_run, waive)

    command.__doc__ = doc
    return orphans.command(action)(command)


adopt = _verb(
    "adopt", "Adopt tagged object ID (class b) matching a live host: an orphanAdopted fact; the cloud is unchanged."
)
return_ = _verb(
    "return",
    "Return the finding ID (object id or instance key): (a) returned, (b) terminated, (c) retired. "
    "Refused with every guard that blocks it named (exit 1).",
)
