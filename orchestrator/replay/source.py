"""What a replay replays: a flight recording or a workload trace, read into a model world.

A SOURCE is a recording (docs/recording.md; JSON lines, gzip or not) or a trace in the Standard
Workload Format (``.swf``, gzip or not). ``auto`` tells them apart by the first line that is not
blank: a recording's is a JSON object, a trace's a ``;`` comment or a job line of numbers. Both
are untrusted input: a damaged file is one line naming the file and what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.recording import Record
from orchestrator.replay.model import WorldModel
from orchestrator.workspace.recordings import file_lines, load_recording

RECORDING: Final = "recording"
SWF: Final = "swf"
FORMATS: Final = ("auto", RECORDING, SWF)


@dataclass(frozen=True)
class Source:
    """A source read: its model world and, for a recording, its records (what happened)."""

    path: Path
    kind: str
    model: WorldModel
    records: tuple[Record, ...] = ()


def sniff(path: Path) -> str:
    """``recording`` or ``swf``, from the first line that is not blank."""
    try:
        for number, raw in enumerate(file_lines(path), 1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith(b"{"):
                return RECORDING
            if line.startswith(b";") or line[:1].isdigit():
                return SWF
            raise UsageError(
                f"{path}: line {number}: neither a recording (JSON lines) nor a workload trace (SWF); "
                "say which with --format"
            )
    except OSError as exc:
        raise UsageError(f"{path}: not readable: {exc.strerror or exc}") from None
    raise UsageError(f"{path}: empty: nothing to replay")


def load_source(path: Path, config: Config, fmt: str = "auto", template: str | None = None) -> Source:
    """The model world of ``path`` (``fmt``: auto, recording or swf); ``template`` puts every job
    of a trace on that template (docs/replay.md, "From a workload trace")."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: not one of {', '.join(FORMATS)}")
    kind = sniff(path) if fmt == "auto" else fmt
    if kind == RECORDING:
        from orchestrator.replay.recorded import model_of_recording

        if template is not None:
            raise UsageError("--template applies to a workload trace, not to a recording")
        records = load_recording(path)
        if not records:
            raise UsageError(f"{path}: no records: nothing to replay")
        return Source(path, kind, model_of_recording(records), tuple(records))
    return Source(path, kind, _swf_model(path, config, template))


def _swf_model(path: Path, config: Config, template: str | None) -> WorldModel:
    from orchestrator.replay.swf import SwfError, SwfMapping, model_of_swf, read_swf

    if template is not None and template not in config.templates:
        raise UsageError(f"--template {template}: not a template of the configuration")
    try:
        lines = (raw.decode("utf-8", errors="replace") for raw in file_lines(path))
        trace = read_swf(lines, str(path))
        mapping = SwfMapping(template=template) if template is not None else None
        return model_of_swf(trace, config, mapping)
    except SwfError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (OSError, EOFError) as exc:
        raise UsageError(f"{path}: not readable: {getattr(exc, 'strerror', None) or exc}") from None


def describe(source: Source) -> dict[str, object]:
    """What the model world holds, for the report (JSON-ready)."""
    model = source.model
    return {
        "path": str(source.path),
        "kind": source.kind,
        "start": model.start,
        "end": model.end,
        "jobs": len(model.jobs),
        "templates": sorted(model.templates),
        "refusal_windows": len(model.refusals),
        "losses": len(model.losses),
        "launch_samples": len(model.latencies.launch),
        "join_samples": len(model.latencies.join),
    }
