"""One daemon per state directory: ``<state_dir>/daemon/daemon.lock``, held for the daemon's life.

Two daemons on one ``state_dir`` would share its working directories, audit log, status file
and join tokens, each removing what it takes for the other's leftovers (the join tokens of a
"dead" run, ``services/join_tokens.py``) and overwriting the other's status. The second one is
refused before it takes anything: one line naming the running one, exit 9 (``LeaseHeld``).
The lock is the operating system's (``flock``): a daemon killed with ``kill -9`` holds it no
more, so a restart after a crash is never refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from filelock import FileLock, Timeout

from orchestrator import durable
from orchestrator.errors import FinalError, LeaseHeld

LOCK_FILE: Final = "daemon.lock"
PID_FILE: Final = "daemon.pid"


def hold_state_dir(state_dir: Path, pid: int) -> FileLock:
    """Take the state directory's daemon lock without waiting (kept until the process exits);
    ``LeaseHeld`` naming the daemon that has it."""
    try:
        directory = durable.private_tree(state_dir, "daemon")  # as the status file beside it
        lock = FileLock(str(directory / LOCK_FILE), timeout=0, mode=durable.PRIVATE_FILE, thread_local=False)
        lock.acquire()
    except Timeout:
        try:
            holder = f"process {(directory / PID_FILE).read_text().strip()}"
        except OSError:
            holder = "another process"
        raise LeaseHeld(
            f"state_dir {state_dir}: another xceprov daemon ({holder}) runs on it; stop that one first, "
            "or give this one a state_dir of its own",
            holder=holder,
        ) from None
    except OSError as exc:  # (after Timeout, itself an OSError) a directory this user cannot use
        raise FinalError(f"state_dir {state_dir}: cannot be used ({exc.strerror or type(exc).__name__})") from None
    durable.write_bytes_atomic(directory / PID_FILE, f"{pid}\n".encode())
    return lock
