"""One ``xceprov replay``: read the source, run the real pass on the model world, compare.

The replay runs in a private, throw-away state directory (never the site's: its facts, desired
sets and documents are the model world's, and the configuration's Terraform backend is forced
local by the runner), against the model engine only: nothing reaches a cloud or a controller.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Final

from orchestrator.model.config import Config
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.report import ReplayReport
from orchestrator.replay.runner import ReplayObserver, run_replay
from orchestrator.replay.source import Source, describe

# Where a replay's throw-away state directory goes when the machine has a memory file system:
# the pass writes its documents durably (fsync'd), which a replay's state never needs.
MEMORY_DIR: Final = Path("/dev/shm")


def scratch_parent() -> str | None:
    """The directory a replay's temporary state directory is made in: memory when there is a
    writable one, else the system's temporary directory (None)."""
    return str(MEMORY_DIR) if MEMORY_DIR.is_dir() and os.access(MEMORY_DIR, os.W_OK | os.X_OK) else None


def replay(
    config: Config,
    source: Source,
    *,
    candidate: str,
    seed: int = 0,
    samples_every: float = 60.0,
    state_dir: Path | None = None,
    observe: ReplayObserver | None = None,
    clock: VirtualClock | None = None,
) -> ReplayReport:
    """Replay ``source`` under ``config`` (named ``candidate`` in the report); ``state_dir``: the
    replay's own (a temporary one, removed after, when None); ``observe`` watches the run on
    ``clock`` (:func:`~orchestrator.replay.runner.run_replay`)."""
    started = time.perf_counter()
    recorded = None
    if source.records:
        from orchestrator.replay.recorded import figures_of_recording

        recorded = figures_of_recording(source.records, config, samples_every)
    if state_dir is None:
        with tempfile.TemporaryDirectory(prefix="xceprov-replay-", dir=scratch_parent()) as tmp:
            replayed = run_replay(
                config, source.model, state_dir=Path(tmp), seed=seed, samples_every=samples_every, observe=observe,
                clock=clock,
            )  # fmt: skip
    else:
        replayed = run_replay(
            config, source.model, state_dir=state_dir, seed=seed, samples_every=samples_every, observe=observe,
            clock=clock,
        )  # fmt: skip
    return ReplayReport(describe(source), candidate, replayed, recorded, seed, time.perf_counter() - started)
