"""Ctrl-C during a play: the first ends it between two tasks, a second at once; the verb then exits 130.

Python's own SIGINT handling would raise ``KeyboardInterrupt`` wherever the main thread is (in
ansible-runner's loop), and ``ansible-playbook``, which runs in a session of its own, would play
on without anyone reading it. Here the signal only asks the runner to stop the play
(``clients.ansible.runner.PlayStop``); once the play has ended, the caller reports what it has and
raises ``KeyboardInterrupt`` (:meth:`CtrlC.raise_if_pressed`): ``xceprov: interrupted``, exit 130.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from orchestrator.clients.ansible.runner import PlayStop

_FIRST = "xceprov: stopping the play after its current task (Ctrl-C again to stop it now)\n"


class CtrlC:
    """The Ctrl-C presses seen while a play ran."""

    def __init__(self, grace: float) -> None:
        self.pressed = threading.Event()
        self.again = threading.Event()
        self.stop = PlayStop(self.pressed.is_set, grace, "interrupted (Ctrl-C)", self.again.is_set)

    def handle(self, _signum: int, _frame: FrameType | None) -> None:
        """The SIGINT handler: the first press asks for a stop between tasks, the next for one now."""
        if self.pressed.is_set():
            self.again.set()
            return
        self.pressed.set()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(_FIRST)
            sys.stderr.flush()

    def raise_if_pressed(self) -> None:
        """``KeyboardInterrupt`` when Ctrl-C was pressed (the command line exits 130)."""
        if self.pressed.is_set():
            raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_stops_the_play(grace: float) -> Iterator[CtrlC]:
    """SIGINT handled by a :class:`CtrlC` within the block (main thread only; elsewhere, as before)."""
    presses = CtrlC(grace)
    if threading.current_thread() is not threading.main_thread():
        yield presses
        return
    previous = signal.signal(signal.SIGINT, presses.handle)
    try:
        yield presses
    finally:
        signal.signal(signal.SIGINT, previous)
