"""The per-host lines of a bootstrap: a line per state change when not a terminal, updated in
place on a terminal (a real pty), the failing task kept, hostile names and reasons made harmless."""

from __future__ import annotations

import io
import os
import pty
import re
import threading

import pytest
from rich.console import Console

from orchestrator.cli.progress import ProgressView
from orchestrator.model.progress import HostDone, PhaseEnded, PhaseStarted, TaskDone, TaskStarted

SCOPE = "sim op1"


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def play(view: ProgressView, clock: Clock, hosts: list[str], tasks: int, fail: dict[str, str] | None = None) -> None:
    """A bootstrap of ``tasks`` tasks on ``hosts``, one second per task; ``fail``: host -> task it fails at."""
    fail = fail or {}
    view(PhaseStarted("bootstrap", SCOPE, len(hosts), tuple(hosts)))
    failed: set[str] = set()
    for t in range(tasks):
        for host in hosts:
            if host in failed:
                continue
            task = f"task {t}"
            view(TaskStarted(host, task))
            clock.now += 1.0
            if fail.get(host) == task:
                view(TaskDone(host, task, "failed"))
                view(HostDone("bootstrap", SCOPE, host, "failed", f"at task '{task}': it broke"))
                failed.add(host)
            else:
                view(TaskDone(host, task, "changed"))
    for host in hosts:
        if host not in failed:
            view(HostDone("bootstrap", SCOPE, host, "changed"))
    view(PhaseEnded("bootstrap", SCOPE))


def plain(hosts: bool = True) -> tuple[ProgressView, io.StringIO, Clock]:
    out = io.StringIO()
    clock = Clock()
    view = ProgressView(Console(file=out, width=200), interval=10.0, clock=clock, hosts=hosts)
    assert not view.live
    return view, out, clock


@pytest.mark.parametrize("tasks", [3, 40])
def test_not_a_terminal_a_line_per_host_state_change_never_per_task(tasks: int) -> None:
    view, out, clock = plain()
    with view:
        play(view, clock, ["cpu-1", "cpu-2"], tasks, fail={"cpu-2": "task 1"})
    lines = [ln for ln in out.getvalue().splitlines() if ": cpu-" in ln]
    assert lines == [
        "bootstrap sim op1: cpu-1 waiting",
        "bootstrap sim op1: cpu-2 waiting",
        "bootstrap sim op1: cpu-1 running (task 'task 0')",
        "bootstrap sim op1: cpu-2 running (task 'task 0')",
        # The failure keeps the task it failed at, and its time in the play.
        "bootstrap sim op1: cpu-2 failed after 4s: at task 'task 1': it broke",
        f"bootstrap sim op1: cpu-1 changed after {tasks + 2}s",
    ]
    assert "\x1b" not in out.getvalue()


def test_quiet_shows_the_phase_lines_only() -> None:
    view, out, clock = plain(hosts=False)
    with view:
        play(view, clock, ["cpu-1", "cpu-2"], 3, fail={"cpu-2": "task 1"})
    assert out.getvalue().splitlines() == [
        "bootstrap sim op1: 0/2 hosts done",
        "bootstrap sim op1: 1/2 hosts done, 1 failed",
    ]


def test_hostile_names_and_reasons_print_as_escapes_and_never_as_markup() -> None:
    view, out, _clock = plain()
    host = "evil\x1b[2J\u202e"
    with view:
        view(PhaseStarted("bootstrap", SCOPE, 1, (host,)))
        view(TaskStarted(host, "Install [bold]x[/bold]\x1b]0;owned\x07"))
        view(HostDone("bootstrap", SCOPE, host, "failed", "at task 'Install': \x1b[31mred\nsecond line"))
        view(PhaseEnded("bootstrap", SCOPE))
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "bootstrap sim op1: evil\\x1b[2J\\u202e running (task 'Install [bold]x[/bold]\\x1b]0;owned\\x07')" in text
    assert "evil\\x1b[2J\\u202e failed after 0s: at task 'Install': \\x1b[31mred\\nsecond line" in text


class PtyConsole:
    """A rich console writing to a real pseudo-terminal; everything written is read back."""

    def __init__(self) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.file = os.fdopen(slave, "w", encoding="utf-8")
        self.console = Console(file=self.file, width=120, height=30, color_system=None)
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.chunks.append(data)

    def close(self) -> str:
        self.file.flush()
        self.file.close()
        self.reader.join(10)
        os.close(self.master)
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def test_on_a_terminal_each_host_line_is_updated_in_place() -> None:
    tty = PtyConsole()
    hostile = "evil[bold]\x1b[2J"
    try:
        assert tty.console.is_terminal
        clock = Clock()
        view = ProgressView(tty.console, clock=clock)
        assert view.live
        with view:
            view(PhaseStarted("bootstrap", SCOPE, 3, ("cpu-1", "cpu-2", hostile)))
            view(TaskStarted("cpu-1", "Copy the node manager archive"))
            view(TaskStarted("cpu-2", "Copy the node manager archive"))
            clock.now = 65.0
            view(HostDone("bootstrap", SCOPE, "cpu-2", "failed", "at task 'Copy the node manager archive': no file"))
            view(TaskStarted("cpu-1", "Write the configuration"))
            view(HostDone("bootstrap", SCOPE, hostile, "unreachable", "at task 'Gather': [red]x\x1b[0m"))
            clock.now = 70.0
            view(HostDone("bootstrap", SCOPE, "cpu-1", "changed"))
            view(PhaseEnded("bootstrap", SCOPE))
    finally:
        text = tty.close()
    # Earlier states were drawn, then erased and drawn again in place (cursor up, erase line).
    assert re.search(r"cpu-1 +waiting +0:00", text)
    assert re.search(r"cpu-1 +running +0:00 +Copy the node manager archive", text)
    assert "\x1b[1A\x1b[2K" in text
    # The screen's last state: the failure with its task, the other host done at 1:10.
    last = text.rsplit("bootstrap sim op1:", 1)[-1]
    assert re.search(r"cpu-2 +failed +1:05 +at task 'Copy the node manager archive': no file", last), last
    assert re.search(r"cpu-1 +changed +1:10", last), last
    # A hostile name and reason: escaped, and their brackets shown as they are (no markup).
    assert "evil[bold]\\x1b[2J  unreachable  1:05  at task 'Gather': [red]x\\x1b[0m" in last, last
    assert "\x1b[2J" not in text


def test_hosts_that_do_not_fit_the_terminal_show_failures_and_unfinished_ones_first() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, height=8, color_system=None)
    clock = Clock()
    hosts = [f"cpu-{i:02d}" for i in range(20)]
    view = ProgressView(console, clock=clock)
    with view:
        view(PhaseStarted("bootstrap", SCOPE, len(hosts), tuple(hosts)))
        for host in hosts:
            view(TaskStarted(host, "Configure the node manager"))
        for host in hosts[:14]:
            view(HostDone("bootstrap", SCOPE, host, "changed"))
        view(HostDone("bootstrap", SCOPE, "cpu-19", "failed", "at task 'Configure the node manager': disk full"))
        last = out.getvalue().rsplit("bootstrap sim op1:", 1)[-1]
    # 8 rows: the phase, 5 hosts (the failure, then the unfinished ones), a count of the rest, the cursor's.
    shown = re.findall(r"cpu-\d\d +\w+", last)
    assert [s.split()[1] for s in shown] == ["failed", "running", "running", "running", "running"], last
    assert shown[0].startswith("cpu-19") and "... 15 more hosts" in last
