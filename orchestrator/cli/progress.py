"""Live progress of long verbs (apply, bootstrap, destroy, return) on the command line's stderr.

The verbs hand a :class:`ProgressView` as the progress sink to their service; the view folds the
events into a :class:`~orchestrator.model.progress.ProgressBoard` (counts per phase) and a
:class:`~orchestrator.model.progress.HostBoard` (one line per host of a bootstrap) and renders them:

* on a terminal, one line per phase (plan, apply, bootstrap, decommission of an op) and under
  them one line per bootstrapped host (state, current or failing task, time in the play), all
  updated in place (``rich``'s live progress display) and left on the screen as they ended;
  when the hosts do not fit the terminal, the unfinished and failed ones are shown first;
* anywhere else (CI, pipes, the daemon's journal), no animation: a plain line when a long phase
  starts, one when a phase ends, and between them at most one line per ``interval`` seconds,
  only when a count moved; plus one line per host each time its state changes (waiting,
  running, its outcome). The number of lines grows with hosts, never with tasks;
* ``hosts=False`` (the verbs' ``--quiet``): no per-host lines, only the phases' (as many lines
  for 500 hosts as for 5);
* per-task lines (host, status, task) only with ``-v``, in both cases.

Host names, task names and reasons come from the cloud and from the hosts: every line passes
through ``printable`` and reaches rich as plain text, never as markup.

Progress goes to stderr, so that stdout keeps the verb's results (``--json`` stays parseable).
When the verb fails, the view ends by listing every instance and host it saw with its outcome,
so the operator knows what was done before the error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from orchestrator.model.progress import (
    GOOD_HOST_OUTCOMES,
    HOST_PHASES,
    HostBoard,
    HostLine,
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
# The phases whose hosts get a line each (a decommission stays counted only: it is short).
HOST_LINE_PHASES: frozenset[Phase] = frozenset({"bootstrap"})
# Which hosts a terminal too short for all of them shows first: failures, then unfinished ones.
_FIRST = {"failed": 0, "unreachable": 0, "running": 1, "waiting": 2}


def host_text(line: HostLine, now: float) -> str:
    """A host's plain line at a state change: ``bootstrap op op1: cpu-3 failed after 12s: at task 'X': why``."""
    head = f"{line.phase} {line.scope}".rstrip()
    if line.state == "waiting":
        return f"{head}: {line.host} waiting"
    if line.state == "running":
        return f"{head}: {line.host} running (task '{line.task}')"
    why = f": {line.reason}" if line.reason and line.state not in GOOD_HOST_OUTCOMES else ""
    return f"{head}: {line.host} {line.state} after {line.elapsed(now):.0f}s{why}"


def host_table(lines: list[HostLine], now: float, room: int) -> Table | None:
    """The hosts' live lines (host, state, time in the play, task or reason), at most ``room`` rows."""
    if not lines:
        return None
    shown = lines if len(lines) <= room else sorted(lines, key=lambda x: _FIRST.get(x.state, 3))[: max(room - 1, 1)]
    table = Table.grid(padding=(0, 2))
    for _ in range(4):
        table.add_column(no_wrap=True, overflow="ellipsis")
    for line in shown:
        seconds = int(line.elapsed(now))
        detail = line.task if line.state == "running" else line.reason
        # Text, never markup: a host name or a reason with "[...]" is shown as it is.
        table.add_row(
            Text(printable(line.host)),
            Text(line.state),
            Text(f"{seconds // 60}:{seconds % 60:02d}"),
            Text(printable(detail)),
        )
    if len(shown) < len(lines):
        table.add_row(Text(f"... {len(lines) - len(shown)} more hosts"), Text(""), Text(""), Text(""))
    return table


class _Display(Progress):
    """rich's live progress bars, with the per-host lines under them."""

    def __init__(
        self, hosts: Callable[[int], RenderableType | None], console: Console, *columns: Any, **kwargs: Any
    ) -> None:
        # Set before rich's own set-up, which renders once before ``self.console`` exists.
        self._hosts, self._screen = hosts, console
        super().__init__(*columns, console=console, **kwargs)

    def get_renderables(self) -> Iterable[RenderableType]:
        """The bars, then the hosts in the rows the terminal has left."""
        yield self.make_tasks_table(self.tasks)
        table = self._hosts(max(self._screen.height - len(self.tasks) - 1, 2))
        if table is not None:
            yield table


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
        hosts: bool = True,
    ) -> None:
        """``live``: animate (default: when ``console`` is a terminal); ``interval``: plain-line
        spacing; ``hosts``: a line per bootstrapped host (False: the phases' lines only)."""
        self.console = console or Console(stderr=True, highlight=False)
        self.verbose = verbose
        self.live = self.console.is_terminal if live is None else live
        self.interval = interval
        self.clock = clock
        self.show_hosts = hosts
        self.board = ProgressBoard()
        self.hosts = HostBoard(clock)
        self._lock = threading.Lock()
        self._bars: Progress | None = None
        self._tasks: dict[tuple[Phase, str], TaskID] = {}
        self._last_line = clock()
        self._shown: dict[tuple[Phase, str], str] = {}

    # -- the context: the live display runs while inside ------------------------------------------

    def __enter__(self) -> ProgressView:
        if self.live:
            self._bars = _Display(
                self._host_rows,
                self.console,
                SpinnerColumn(finished_text="·"),
                TextColumn("{task.description}"),
                BarColumn(bar_width=24),
                TimeElapsedColumn(),
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
        changed = self.hosts(event) if self._for_hosts(event) else []
        if isinstance(event, TaskDone) and self.verbose:
            self._line(f"  {event.host:<24} {event.status:<11} {event.task}")
        key = phase_key(event)
        count = self.board.count(*key) if key is not None else None
        with self._lock:
            if self._bars is not None:
                if count is not None:
                    self._update_bar(count)
                if changed:  # a host's new state is drawn now, not at the next tick
                    self._bars.refresh()
            else:
                self._plain(count, event)
                now = self.clock()
                for line in changed:
                    self._line(host_text(line, now))

    def _for_hosts(self, event: ProgressEvent) -> bool:
        """Whether the host lines take ``event`` (a play they name hosts of, or one of its hosts)."""
        if not self.show_hosts:
            return False
        return not isinstance(event, PhaseStarted) or event.phase in HOST_LINE_PHASES

    def _host_rows(self, room: int) -> Table | None:
        return host_table(self.hosts.snapshot(), self.clock(), room)

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


def progress_view(verbose: int, quiet: bool = False) -> ProgressView:
    """The view of a verb: stderr, live when stderr is a terminal, per-task lines with ``-v``,
    no per-host lines with ``--quiet``."""
    return ProgressView(verbose=verbose, hosts=not quiet)
