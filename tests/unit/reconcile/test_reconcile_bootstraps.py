"""Bootstrap attempts per host: retried with backoff, given up after the attempts, kept on disk."""

from __future__ import annotations

import random
import stat
from pathlib import Path

import pytest

from orchestrator.errors import FinalError
from orchestrator.model.backoff import Backoff
from orchestrator.reconcile.bootstraps import BOOTSTRAP_FILE, BootstrapTracker

BACKOFF = Backoff(10.0, 60.0)


def record(tracker: BootstrapTracker, outcome: str, now: float, attempts: int = 3) -> str:
    current = tracker.get("op-a-000", "sim", "cpu", "h0")
    return tracker.record(current, outcome, now, attempts=attempts, backoff=BACKOFF, rng=random.Random(1)).action


def test_a_failed_host_waits_its_backoff_then_is_given_up_after_the_attempts(tmp_path: Path) -> None:
    tracker = BootstrapTracker.load(tmp_path)
    assert tracker.get("op-a-000", "sim", "cpu", "h0").due(0.0)
    assert record(tracker, "failed: unreachable\nmore lines", 100.0) == "retry"
    first = tracker.get("op-a-000", "sim", "cpu", "h0")
    assert first.outcome == "failed: unreachable" and first.attempts == 1
    assert 105.0 <= first.next_at <= 110.0  # equal jitter: half to all of the base delay
    assert not first.due(first.next_at - 0.001) and first.due(first.next_at)
    assert record(tracker, "failed: unreachable", first.next_at) == "retry"
    second = tracker.get("op-a-000", "sim", "cpu", "h0")
    assert second.next_at - first.next_at >= 10.0  # the second wait is longer: 10 to 20 s
    assert record(tracker, "failed: unreachable", second.next_at) == "give-up"
    last = tracker.get("op-a-000", "sim", "cpu", "h0")
    assert last.gave_up and not last.due(1e12)


def test_a_success_is_not_due_again_and_survives_a_restart(tmp_path: Path) -> None:
    tracker = BootstrapTracker.load(tmp_path)
    record(tracker, "failed: timeout", 1.0)
    assert record(tracker, "ok", 50.0) == "done"
    again = BootstrapTracker.load(tmp_path).get("op-a-000", "sim", "cpu", "h0")
    assert again.ok and again.attempts == 2 and not again.due(1e12)
    assert stat.S_IMODE((tmp_path / BOOTSTRAP_FILE).stat().st_mode) == 0o600


def test_a_join_is_recorded_once_and_gone_hosts_are_forgotten(tmp_path: Path) -> None:
    tracker = BootstrapTracker.load(tmp_path)
    [joined] = tracker.joined([tracker.get("op-a-000", "sim", "cpu", "h0")])
    assert joined.joined and not joined.due(0.0)
    tracker.joined([tracker.get("op-a-001", "sim", "cpu", "h1")])
    assert tracker.prune(["op-a-001"]) == ["op-a-000"]
    assert [r.key for r in BootstrapTracker.load(tmp_path).records()] == ["op-a-001"]


def test_a_damaged_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / BOOTSTRAP_FILE).write_text('{"format": 1, "hosts": {"k": {"provider": "sim"}}}')
    with pytest.raises(FinalError, match=rf"{BOOTSTRAP_FILE}: not a bootstrap record file") as caught:
        BootstrapTracker.load(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_stopped_play_counts_no_attempt_and_the_host_is_due_at_the_next_start(tmp_path: Path) -> None:
    tracker = BootstrapTracker.load(tmp_path)
    record(tracker, "failed: unreachable", 100.0)
    tried = tracker.get("op-a-000", "sim", "cpu", "h0")
    [stopped] = tracker.stopped([tried], "stopped: not finished: the daemon is stopping\nmore", 101.0)
    assert (stopped.attempts, stopped.outcome) == (1, "stopped: not finished: the daemon is stopping")
    # Kept across the restart, and due at once (no backoff): the next start bootstraps it again.
    again = BootstrapTracker.load(tmp_path).get("op-a-000", "sim", "cpu", "h0")
    assert again == stopped and again.due(101.0) and not again.ok and not again.gave_up
