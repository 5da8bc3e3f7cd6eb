"""``xceprov record export|show``: the daemon's flight recordings (docs/recording.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.group("record")
def record() -> None:
    """The daemon's flight recordings: demand, decisions, op and host timings (docs/recording.md)."""


def _when(option: str, text: str | None, now: float) -> float | None:
    from orchestrator.errors import UsageError
    from orchestrator.model.durations import since_time

    if text is None:
        return None
    try:
        return since_time(text, now)
    except ValueError as exc:
        raise UsageError(f"{option} {text}: {exc}") from exc


@record.command("export")
@click.option("--since", metavar="WHEN", help="From WHEN (a Unix time, or 30m, 2h, 1d: ago); default: the oldest.")
@click.option("--until", metavar="WHEN", help="Until WHEN (same forms); default: now.")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE (gzip when it ends .gz); default: stdout.")
@click.option("--json-summary", is_flag=True, help="Print the summary of what was written as JSON (on stderr).")
@pass_ctx
def export(ctx: CliContext, since: str | None, until: str | None, output: str | None, json_summary: bool) -> None:
    """Write one recording of the period from the daemon's recording segments, records in time
    order; the config and demand standing at its start come first."""
    import time
    from pathlib import Path

    from orchestrator.services.recording import export as export_recording

    now = time.time()
    summary = export_recording(
        ctx.config().config,
        _when("--since", since, now),
        _when("--until", until, now),
        Path(output) if output else None,
    )
    if json_summary:
        click.echo(json.dumps(summary.to_json(), indent=2, sort_keys=True), err=output is None)
    elif output:
        click.echo(f"{output}: {summary.records} records{_period(summary.to_json())}")


@record.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def show(file: str, as_json: bool) -> None:
    """Summarize the recording FILE: its period, its records by kind, its templates."""
    from pathlib import Path

    from orchestrator.model.recording import KINDS
    from orchestrator.services.recording import show as show_recording

    summary = show_recording(Path(file)).to_json()
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    click.echo(f"{file}: {summary['records']} records{_period(summary)}")
    click.echo("  " + ", ".join(f"{kind} {summary['counts'][kind]}" for kind in KINDS))
    click.echo("  templates: " + (", ".join(summary["templates"]) or "none"))


def _period(summary: dict[str, Any]) -> str:
    import time

    if summary["first"] is None:
        return ""
    span = summary["last"] - summary["first"]
    first, last = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(summary[k])) for k in ("first", "last"))
    return f" from {first} to {last} UTC ({span:.0f}s)"
