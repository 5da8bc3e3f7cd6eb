"""What the operator sees of long work: live lines on a terminal, a bounded few lines elsewhere."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from orchestrator.cli.progress import ProgressView
from orchestrator.model.progress import HostDone, InstanceDone, PhaseEnded, PhaseStarted, PlanDone, TaskDone


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def burst(view: ProgressView, clock: Clock, hosts: int, tasks: int, seconds: float) -> None:
    """An op of ``hosts`` instances, then a bootstrap of ``tasks`` tasks per host over ``seconds``."""
    scope = "sim op1"
    view(PhaseStarted("plan", scope, 1))
    view(PlanDone(scope, hosts, 0, 0))
    view(PhaseEnded("plan", scope))
    view(PhaseStarted("apply", scope, hosts))
    for i in range(hosts):
        view(InstanceDone(scope, f"op1-{i:03d}", f"h{i:03d}", "create"))
    view(PhaseEnded("apply", scope))
    view(PhaseStarted("bootstrap", scope, hosts))
    step = seconds / (hosts * tasks)
    for t in range(tasks):
        for i in range(hosts):
            clock.now += step
            view(TaskDone(f"h{i:03d}", f"task {t}", "ok"))
            if i == 0 and t == 0:
                view(HostDone("bootstrap", scope, "h000", "unreachable", "at task 'task 0': refused"))
    for i in range(1, hosts):
        view(HostDone("bootstrap", scope, f"h{i:03d}", "changed"))
    view(PhaseEnded("bootstrap", scope))


def plain(verbose: int = 0) -> tuple[ProgressView, io.StringIO, Clock]:
    out = io.StringIO()
    clock = Clock()
    view = ProgressView(Console(file=out, width=200), verbose=verbose, interval=10.0, clock=clock)
    assert not view.live  # not a terminal: no animation
    return view, out, clock


@pytest.mark.parametrize("tasks", [5, 60])
def test_plain_lines_are_few_and_do_not_grow_with_tasks(tasks: int) -> None:
    view, out, clock = plain()
    with view:
        burst(view, clock, hosts=50, tasks=tasks, seconds=35.0)
    lines = out.getvalue().splitlines()
    assert lines == [
        "plan sim op1: 1/1 planned (+50 ~0 -0)",
        "apply sim op1: 0/50 instances",
        "apply sim op1: 50/50 created",
        "bootstrap sim op1: 0/50 hosts done",
        # At most one line per 10 s, when a count moved: the failure (at 0 s) is told at 10 s,
        # nothing at 20 and 30 s (no count moved), the first host done at the end (35 s).
        "bootstrap sim op1: 0/50 hosts done, 1 failed",
        "bootstrap sim op1: 1/50 hosts done, 1 failed",
        "bootstrap sim op1: 49/50 hosts done, 1 failed",
    ]
    assert not [ln for ln in lines if "task " in ln]


def test_plain_lines_with_v_show_every_task() -> None:
    view, out, clock = plain(verbose=1)
    with view:
        burst(view, clock, hosts=4, tasks=3, seconds=1.0)
    lines = out.getvalue().splitlines()
    task_lines = [ln for ln in lines if ln.startswith("  h")]
    assert len(task_lines) == 12
    assert task_lines[0].split() == ["h000", "ok", "task", "0"]
    assert lines[-1] == "bootstrap sim op1: 3/4 hosts done, 1 failed"


def test_live_on_a_terminal_leaves_one_final_line_per_phase() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    clock = Clock()
    view = ProgressView(console, clock=clock)
    assert view.live
    with view:
        burst(view, clock, hosts=20, tasks=30, seconds=5.0)
    text = out.getvalue()
    assert "apply sim op1: 20/20 created" in text
    assert "bootstrap sim op1: 19/20 hosts done, 1 failed" in text
    assert "task 7" not in text  # no per-task line without -v


def test_a_failure_lists_what_was_done() -> None:
    view, out, _ = plain()
    with pytest.raises(RuntimeError), view:
        view(PhaseStarted("apply", "sim op3", 3))
        view(InstanceDone("sim op3", "op3-000", "h0", "create"))
        view(InstanceDone("sim op3", "op3-001", "h1", "create", ok=False, reason="Error: capacity exhausted"))
        raise RuntimeError("the apply failed")
    lines = out.getvalue().splitlines()
    assert lines[-2:] == ["h0  created", "h1  apply failed  Error: capacity exhausted"]
