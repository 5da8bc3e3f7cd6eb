"""Killing what is left of a play: every process that carries the run's own environment entry.

ansible-runner's cancel and its timeout SIGKILL the process group of ``ansible-playbook``. Since
ansible-core 2.19 each worker calls ``setsid()`` (``WorkerProcess._detach``), so the workers, and
the task each one runs (an ssh, a local command), live on in sessions of their own, re-parented
to init once the main process is gone. They all inherit the run's environment, and one entry of
it names the run's private directory (the runner's stop file): that is how they are found,
whoever their parent is by then. An unprivileged process reads only its own processes'
environments, which are exactly the ones it may kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

_PROC = Path("/proc")
_GONE_WAIT = 30.0  # seconds a killed process may take to be gone: well under one at rest, seconds at load 100+


def processes_with(entry: str) -> list[int]:
    """Pids of the live processes whose environment has ``entry`` (``NAME=value``), ours excluded."""
    wanted = entry.encode()
    found: list[int] = []
    for proc in _PROC.iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def kill_all(entry: str) -> list[int]:
    """SIGKILL every process whose environment has ``entry``; the pids killed.

    Searched again after each round: a process caught in the middle of an ``execve`` shows no
    environment for an instant, and must not be missed.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + _GONE_WAIT
    while _live(entry) and time.monotonic() < deadline:
        killed.update(stop_then_kill(lambda: _live(entry)))
    return sorted(killed)


def _live(entry: str) -> list[int]:
    return [p for p in processes_with(entry) if _running(p)]


def stop_then_kill(find: Callable[[], Iterable[int]]) -> list[int]:
    """SIGKILL every process ``find()`` names; the pids killed.

    Each is stopped first, and ``find`` asked again until it names none not stopped yet, so no
    process forks a new one, or is re-parented out of reach, while the others are being found.
    """
    stopped: set[int] = set()
    while fresh := [p for p in find() if p not in stopped]:
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A SIGKILL takes effect asynchronously: once this returns, none of them runs any more.
    deadline = time.monotonic() + _GONE_WAIT
    while any(_running(p) for p in stopped) and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(stopped)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (which runs nothing; its parent reaps it)."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
