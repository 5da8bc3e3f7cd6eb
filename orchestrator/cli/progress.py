"""Live progress of long verbs (apply, bootstrap, destroy, return) on the command line's stderr.

The verbs hand a :class:`ProgressView` as the progress sink to their service; the view folds the
events into a :class:`~orchestrator.model.progress.ProgressBoard` and renders it:

* on a terminal, one line per phase (plan, apply, bootstrap, decommission of an op) that updates
  in place (``rich``'s live progress display), left on the screen with its final counts;
* anywhere else (CI, pipes, the daemon's journal), no animation: a plain line when a long phase
  starts, one when a phase ends, and between them at most one line per ``interval`` seconds,
  only when a count moved. The number of lines depends on the phases, never on hosts or tasks;
* per-task lines (host, status, task) only with ``-v``, in both cases.

Progress goes to stderr, so that stdout keeps the verb's results (``--json`` stays parseable).
When the verb fails, the view ends by listing every instance and host it saw with its outcome,
so the operator knows what was done before the error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from orchestrator.model.progress import (
    HOST_PHASES,
    Phase,
    PhaseCount,
    PhaseEnded,
    PhaseStarted,
    ProgressBoard,
    ProgressEvent,
    TaskDone,
    phase_key,
)
from orchestrator.model.text import printable

PLAIN_INTERVAL = 10.0  # seconds between two plain lines of a running phase, at most


class ProgressView:
    """A progress sink that renders on ``console`` (a context manager: live display while inside)."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        verbose: int = 0,
        live: bool | None = None,
        interval: float = PLAIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``live``: animate (default: when ``console`` is a terminal); ``interval``: plain-line spacing."""
        self.console = console or Console(stderr=True, highlight=False)
        self.verbose = verbose
        self.live = self.console.is_terminal if live is None else live
        self.interval = interval
        self.clock = clock
        self.board = ProgressBoard()
        self._lock = threading.Lock()
        self._bars: Progress | None = None
        self._tasks: dict[tuple[Phase, str], TaskID] = {}
        self._last_line = clock()
        self._shown: dict[tuple[Phase, str], str] = {}

    # -- the context: the live display runs while inside ------------------------------------------

    def __enter__(self) -> ProgressView:
        if self.live:
            self._bars = Progress(
                SpinnerColumn(finished_text="·"),
                TextColumn("{task.description}"),
                BarColumn(bar_width=24),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._lock:
            if self._bars is not None:
                for count in self.board.snapshot():
                    self._update_bar(count)
                self._bars.stop()
                self._bars = None
        if exc is not None:
            for unit in self.board.outcomes():
                self._line(unit.describe())

    # -- the sink ---------------------------------------------------------------------------------

    def __call__(self, event: ProgressEvent) -> None:
        """Fold ``event`` in and render what changed (called from worker threads)."""
        self.board(event)
        if isinstance(event, TaskDone) and self.verbose:
            self._line(f"  {event.host:<24} {event.status:<11} {event.task}")
        key = phase_key(event)
        count = self.board.count(*key) if key is not None else None
        with self._lock:
            if self._bars is not None:
                if count is not None:
                    self._update_bar(count)
            else:
                self._plain(count, event)

    def _update_bar(self, count: PhaseCount) -> None:
        assert self._bars is not None
        key = (count.phase, count.scope)
        if key not in self._tasks:
            self._tasks[key] = self._bars.add_task(printable(count.describe()), total=max(count.total, 1))
        task = self._tasks[key]
        self._bars.update(
            task,
            description=printable(count.describe()),
            total=max(count.total, 1),
            completed=count.done + count.failed if count.total else (0 if count.running else 1),
        )
        if not count.running:
            self._bars.stop_task(task)

    def _plain(self, count: PhaseCount | None, event: ProgressEvent) -> None:
        """A plain line at a long phase's first start, at each end, and at most every ``interval``.

        Between start and end, any event (a task, too) may print the running phases whose counts
        moved since their last line, once ``interval`` passed since the last line of all.
        """
        if count is not None and isinstance(event, PhaseStarted):
            key = (count.phase, count.scope)
            first = key not in self._shown
            self._shown.setdefault(key, "")
            if first and (count.phase == "apply" or count.phase in HOST_PHASES):
                self._show(count)
            return
        if count is not None and isinstance(event, PhaseEnded):
            if not count.running:
                self._show(count)
            return
        if self.clock() - self._last_line < self.interval:
            return
        for running in self.board.snapshot():
            if running.running:
                self._show(running)

    def _show(self, count: PhaseCount) -> None:
        """Print the phase's line unless it is the one printed last for that phase."""
        key, text = (count.phase, count.scope), count.describe()
        if self._shown.get(key) == text:
            return
        self._shown[key] = text
        self._last_line = self.clock()
        self._line(text)

    def _line(self, text: str) -> None:
        self.console.print(printable(text), markup=False, highlight=False, soft_wrap=True)


def progress_view(verbose: int) -> ProgressView:
    """The view of a verb: stderr, live when stderr is a terminal, per-task lines with ``-v``."""
    return ProgressView(verbose=verbose)
