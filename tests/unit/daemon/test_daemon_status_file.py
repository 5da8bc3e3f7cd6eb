"""The status file: private, replaced whole, and read back as running, stale, stopped or gone."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import FinalError
from orchestrator.workspace.daemonstatus import read_status, status_path, write_status


def document(pid: int, state: str = "running", written: float = 1000.0) -> dict[str, Any]:
    return {
        "daemon": {"pid": pid, "state": state, "written": written, "reconcile_interval": 30.0},
        "leases": [{"provider": "sim", "held": True, "epoch": "1.1", "remaining": 9.0}],
    }


def test_written_private_and_whole(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = write_status(state, document(os.getpid()))
    assert path == status_path(state) == state / "daemon" / "status.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    write_status(state, document(os.getpid(), written=1010.0))
    assert sorted(p.name for p in path.parent.iterdir()) == ["status.json"]  # no temporary left behind
    found = read_status(state, now=1012.5)
    assert found is not None
    assert found.document["format"] == 1 and found.daemon["written"] == 1010.0
    assert (found.running, found.stale, found.age) == (True, False, 2.5)


def test_no_file_means_no_daemon_ever(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None


def test_running_daemon_silent_for_three_intervals_is_stale(tmp_path: Path) -> None:
    write_status(tmp_path, document(os.getpid(), written=1000.0))
    found = read_status(tmp_path, now=1000.0 + 3 * 30 + 1)
    assert found is not None and found.running and found.stale


def test_stopped_or_dead_daemon_is_not_running(tmp_path: Path) -> None:
    write_status(tmp_path, document(os.getpid(), state="stopped"))
    found = read_status(tmp_path, now=1000.0)
    assert found is not None and not found.running and not found.stale
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_status(tmp_path, document(int(gone.stdout)))  # a pid that has exited (killed daemon)
    found = read_status(tmp_path, now=1000.0)
    assert found is not None and not found.running


@pytest.mark.parametrize("content", [b"{not json", b'{"format": 1}', b'{"format": 7, "daemon": {}}', b"[]"])
def test_a_damaged_file_is_named(tmp_path: Path, content: bytes) -> None:
    path = status_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(FinalError) as info:
        read_status(tmp_path)
    assert str(info.value).startswith(f"{path}: not a daemon status file (")
    assert "\n" not in str(info.value)
