"""The progress board: counts per phase from typed events, failed hosts listed, shards summed."""

from __future__ import annotations

import threading

from orchestrator.model.progress import (
    HostDone,
    InstanceDone,
    PhaseEnded,
    PhaseStarted,
    PlanDone,
    ProgressBoard,
    TaskDone,
    reported_phase,
)


def test_counts_per_phase_of_a_create_op_with_bootstrap() -> None:
    board = ProgressBoard()
    board(PhaseStarted("plan", "sim op1", 1))
    board(PlanDone("sim op1", 3, 0, 0))
    board(PhaseEnded("plan", "sim op1"))
    board(PhaseStarted("apply", "sim op1", 3))
    board(InstanceDone("sim op1", "op1-000", "cpu-a", "create"))
    board(InstanceDone("sim op1", "op1-001", "cpu-b", "create"))
    apply = board.count("apply", "sim op1")
    assert apply is not None and apply.running and apply.describe() == "apply sim op1: 2/3 created"
    board(InstanceDone("sim op1", "op1-002", "cpu-c", "create"))
    board(PhaseEnded("apply", "sim op1"))
    board(PhaseStarted("bootstrap", "sim op1", 3))
    for _ in range(40):
        board(TaskDone("cpu-a", "Write the node manager configuration", "changed"))
    board(HostDone("bootstrap", "sim op1", "cpu-b", "unreachable", "at task 'Wait for SSH': refused"))
    board(HostDone("bootstrap", "sim op1", "cpu-a", "changed"))
    board(HostDone("bootstrap", "sim op1", "cpu-c", "ok"))
    board(PhaseEnded("bootstrap", "sim op1"))

    lines = [c.describe() for c in board.snapshot()]
    assert lines == [
        "plan sim op1: 1/1 planned (+3 ~0 -0)",
        "apply sim op1: 3/3 created",
        "bootstrap sim op1: 2/3 hosts done, 1 failed",
    ]
    assert not any(c.running for c in board.snapshot())
    assert board.tasks == 40
    # One outcome per host, the last phase's word; the failed one with its reason.
    assert [u.describe() for u in board.outcomes()] == [
        "cpu-a  changed",
        "cpu-b  bootstrap unreachable  at task 'Wait for SSH': refused",
        "cpu-c  ok",
    ]
    assert [u.name for u in board.failed()] == ["cpu-b"]


def test_shards_add_their_totals_and_the_phase_runs_until_every_start_ended() -> None:
    board = ProgressBoard()
    board(PhaseStarted("apply", "sim op2", 100))
    board(PhaseStarted("apply", "sim op2", 50))
    board(InstanceDone("sim op2", "op2-000", "", "delete"))
    board(InstanceDone("sim op2", "op2-001", "h1", "create", ok=False, reason="capacity exhausted"))
    board(PhaseEnded("apply", "sim op2"))
    count = board.count("apply", "sim op2")
    assert count is not None and count.total == 150 and count.running
    assert count.describe() == "apply sim op2: 1/150 destroyed, 1 failed"
    board(PhaseEnded("apply", "sim op2"))
    assert not board.phases[("apply", "sim op2")].running
    # An instance without a host name is named by its key.
    assert [u.describe() for u in board.outcomes()] == ["h1  apply failed  capacity exhausted", "op2-000  destroyed"]
    assert board.count("plan", "sim op2") is None


def test_reported_phase_ends_even_when_the_work_fails() -> None:
    board = ProgressBoard()
    try:
        with reported_phase(board, "decommission", "sim", 2):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    count = board.count("decommission", "sim")
    assert count is not None and (count.starts, count.ends, count.total) == (1, 1, 2)


def test_events_from_many_threads_are_all_counted() -> None:
    board = ProgressBoard()
    board(PhaseStarted("bootstrap", "", 400))

    def hosts(prefix: str) -> None:
        for i in range(100):
            board(HostDone("bootstrap", "", f"{prefix}{i}", "failed" if i % 10 == 0 else "ok"))

    threads = [threading.Thread(target=hosts, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    count = board.count("bootstrap", "")
    assert count is not None and (count.done, count.failed) == (360, 40)
    assert count.describe() == "bootstrap: 360/400 hosts done, 40 failed"
    assert len(board.failed()) == 40
