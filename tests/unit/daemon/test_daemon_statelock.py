"""One daemon per state directory: a second is refused naming the first; a killed one frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.daemon.statelock import hold_state_dir
from orchestrator.errors import LeaseHeld

HOLD = """
import os, pathlib, sys, time
from orchestrator.daemon.statelock import hold_state_dir
lock = hold_state_dir(pathlib.Path(sys.argv[1]), os.getpid())
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_holder_is_refused_naming_the_first_and_a_killed_one_frees_the_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeld) as held:
            hold_state_dir(state, os.getpid())
        [line] = str(held.value).splitlines()
        assert line == (
            f"state_dir {state}: another xceprov daemon (process {first.pid}) runs on it; stop that one first, "
            "or give this one a state_dir of its own"
        )
        assert held.value.exit_code == 9
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        if first.stdout is not None:
            first.stdout.close()
    lock = hold_state_dir(state, os.getpid())  # kill -9 left the file, not the lock
    assert (state / "daemon" / "daemon.pid").read_text() == f"{os.getpid()}\n"
    assert (state / "daemon").stat().st_mode & 0o777 == 0o700
    lock.release()
