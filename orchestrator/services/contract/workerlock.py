"""One worker per request: an exclusive lock that the worker holds for its whole life.

The lock is ``flock`` on ``<state_dir>/contract/workers/<request id>.lock``. Whoever starts a
worker takes it first, without waiting (:func:`claim`): when it is taken, a worker of the request
is already running (or being started) and none is started. Taken, it is handed to the worker
process as an inherited descriptor (the lock belongs to the open file, not to a process), and the
starter closes its own copy; so between the claim and the worker's end there is never a moment
when a second starter could take it, and the worker's pid need not be recorded before the spawn
returns for the next caller to know. The kernel drops the lock when the worker ends, however it
ends (a crash, ``kill -9``), so a request whose worker died can be started again.

A worker started without the lock (``xceprov provider work`` by hand, a worker of an older
version) claims it itself and ends at once, changing nothing, when another worker has it.
The lock is local to the machine: on a shared backend, the scripts of one request are expected
on one management host (as LSF and a host factory call them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from orchestrator import durable


def lock_path(state_dir: Path, request_id: str) -> Path:
    """The lock file of ``request_id``'s worker."""
    return state_dir / "contract" / "workers" / f"{request_id}.lock"


def claim(state_dir: Path, request_id: str) -> int | None:
    """The descriptor holding ``request_id``'s worker lock, or None when another holds it."""
    durable.private_tree(state_dir, "contract", "workers")
    fd = os.open(lock_path(state_dir, request_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, durable.PRIVATE_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def adopt(fd: int) -> bool:
    """Whether ``fd`` (inherited from the starter) holds the lock: taking it again on the same
    open file succeeds, on any other it fails (a descriptor that is not the lock file's is no lock)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Not handed on to the worker's own children (Terraform, Ansible, an ssh control
        # master that may outlive it): the lock must end with the worker.
        os.set_inheritable(fd, False)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def exclusive(state_dir: Path, request_id: str, inherited: int | None = None) -> Iterator[bool]:
    """Holds the worker lock of ``request_id`` for the block; yields whether this process has it
    (``inherited``: the descriptor the starter handed over, else the lock is claimed here)."""
    fd = inherited if inherited is not None and adopt(inherited) else claim(state_dir, request_id)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)
