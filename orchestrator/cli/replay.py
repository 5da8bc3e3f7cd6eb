"""``xceprov replay SOURCE [--config FILE] [--json] [--plot FILE] [--record FILE]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.context import CliContext, pass_ctx

if TYPE_CHECKING:
    from orchestrator.model.config import Config
    from orchestrator.replay.report import ReplayReport
    from orchestrator.replay.source import Source

FORMATS = ("auto", "recording", "swf")


@click.command("replay")
@click.argument("source", metavar="SOURCE", type=click.Path(dir_okay=False))
@click.option(
    "--config",
    "candidate",
    metavar="FILE",
    help="The candidate configuration to replay under (default: the site's, as `xceprov --config` finds it).",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True, help="What SOURCE is.")
@click.option("--template", metavar="TEMPLATE", help="A workload trace's jobs all run on TEMPLATE.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="SEED",
    help="Seed of the model's draws.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON (with the samples over time).")
@click.option("--plot", metavar="FILE", help="Also draw the runs side by side into FILE (.png or .svg).")
@click.option("--record", metavar="FILE", help="Also write the replay's own flight recording to FILE (.gz: gzip).")
@pass_ctx
def replay(
    ctx: CliContext,
    source: str,
    candidate: str | None,
    fmt: str,
    template: str | None,
    seed: int,
    as_json: bool,
    plot: str | None,
    record: str | None,
) -> None:
    """What-if replay: run the daemon's own reconcile pass on a virtual clock against a model of
    the cloud and the hosts drawn from SOURCE (a flight recording, or a workload trace in the
    Standard Workload Format), under the CANDIDATE configuration; print cost, host-hours,
    pending host-minutes, launches, returns and lost hosts next to what the recording shows
    happened. Nothing reaches a cloud or a controller (docs/replay.md)."""
    import logging

    from orchestrator.configfile import load_config
    from orchestrator.errors import UsageError
    from orchestrator.replay.session import replay as run
    from orchestrator.replay.source import load_source

    path = Path(source)
    if not path.is_file():
        raise UsageError(f"{source}: no such file")
    if plot is not None:
        from orchestrator.charts import check_chart_path

        check_chart_path(Path(plot))
    loaded = load_config(candidate) if candidate is not None else ctx.config()
    name = candidate or loaded.source
    found = load_source(path, loaded.config, fmt, template)
    # The model world's hosts come and go by the thousand: the pass's own log lines are the
    # replay's, not the site's; -v shows them.
    logger = logging.getLogger("orchestrator")
    level = logger.level
    if not ctx.verbose:
        logger.setLevel(logging.ERROR)
    try:
        if record is None:
            report = run(loaded.config, found, candidate=name, seed=seed)
        else:
            report = _recorded_replay(loaded.config, found, name, seed, Path(record))
    finally:
        logger.setLevel(level)
    if plot is not None:
        from orchestrator.charts import write_run_chart

        runs = [r for r in (report.recorded, report.replayed) if r is not None]
        write_run_chart(runs, Path(plot), title=f"replay of {path.name} under {Path(name).name}")
        click.echo(f"chart written to {plot}", err=True)
    click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True) if as_json else report.text())


def _recorded_replay(config: Config, found: Source, name: str, seed: int, out: Path) -> ReplayReport:
    """The replay with a flight recorder watching it on its virtual clock (the daemon's own
    recorder, as the daemon wires it), its recording written to ``out`` (gzip when ``.gz``)."""
    import tempfile

    from orchestrator.daemon.flightrecorder import FlightRecorder
    from orchestrator.model.config import RecordingSettings
    from orchestrator.replay.clock import VirtualClock
    from orchestrator.replay.session import replay as run
    from orchestrator.replay.session import scratch_parent
    from orchestrator.services.recording import export

    model = found.model
    with tempfile.TemporaryDirectory(prefix="xceprov-replay-", dir=scratch_parent()) as tmp:
        clock = VirtualClock(model.start)
        # One segment a day, nothing removed while the replay runs (its clock spans the model).
        settings = RecordingSettings(segment=86400.0, keep=model.end - model.start + 2 * 86400.0)
        recorder = FlightRecorder(Path(tmp) / "recorder", settings, clock)
        recorder.config(config)
        try:
            report = run(
                config, found, candidate=name, seed=seed, state_dir=Path(tmp) / "run", observe=recorder, clock=clock
            )
        finally:
            recorder.close()
        export(config.model_copy(update={"state_dir": Path(tmp) / "recorder"}), None, None, out)
    return report
