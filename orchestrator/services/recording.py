"""``xceprov record``: a recording of a period from the flight recorder's segments, and its summary.

:func:`export` reads ``<state_dir>/recordings/`` (:mod:`orchestrator.workspace.recordings`) and
writes one recording (JSON lines; gzip when the file name ends ``.gz``) of the records from
``since`` to ``until``, in time order; :func:`show` reads a recording file as untrusted input
(:mod:`orchestrator.model.recording`) and summarizes it. docs/recording.md.
"""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

from orchestrator.durable import PRIVATE_FILE
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.recording import RecordingError, Summary, summarize
from orchestrator.workspace.recordings import load_recording, read_period, recordings_dir


def export(config: Config, since: float | None, until: float | None, out: Path | None) -> Summary:
    """Write the recording of the period to ``out`` (standard output when None); its summary."""
    if since is not None and until is not None and until < since:
        raise UsageError(f"--until {until:.0f} is before --since {since:.0f}: the period is empty")
    try:
        records = read_period(recordings_dir(config.state_dir), since, until)
    except RecordingError as exc:
        raise UsageError(f"{recordings_dir(config.state_dir)}: a damaged segment: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{recordings_dir(config.state_dir)}: not readable: {exc.strerror or exc}") from None
    data = b"".join(r.encode().encode() + b"\n" for r in records)
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        if out.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
        except OSError as exc:
            raise UsageError(f"{out}: not written: {exc.strerror or exc}") from None
    return summarize(records)


def show(path: Path) -> Summary:
    """The summary of the recording file ``path``."""
    return summarize(load_recording(path))
