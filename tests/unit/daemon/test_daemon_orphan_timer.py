"""When the daemon scans for orphans: the interval, the scan after a failover's settle window (injected clock)."""

from __future__ import annotations

from orchestrator.daemon.orphantimer import SETTLE_MARGIN, OrphanTimer

T0 = 1_800_000_000.0


def test_the_first_scan_is_due_at_start_then_one_interval_after_each_scan_ended() -> None:
    timer = OrphanTimer.at_start(600.0, 300.0, T0)
    assert timer.due(T0) == "start"
    timer.scanned(T0, T0 + 40)  # a scan of 40 s: the interval counts from its end
    assert timer.due(T0 + 41) is None and timer.due(T0 + 639) is None
    assert timer.due(T0 + 640) == "interval"
    assert timer.next_due() == (T0 + 640, "interval")


def test_a_new_term_schedules_one_scan_once_its_settle_window_has_passed() -> None:
    timer = OrphanTimer.at_start(600.0, 300.0, T0)
    # At start the term is old (started an hour ago), or its start is not known: no extra scan.
    assert OrphanTimer.at_start(600.0, 300.0, T0).observe_term(3, 0.0, T0) is None
    assert timer.observe_term(3, T0 - 3600, T0) is None
    timer.scanned(T0, T0 + 5)
    # A failover at T0 + 100, noticed at T0 + 102: one scan when the window after the term's start has passed.
    at = timer.observe_term(4, T0 + 100, T0 + 102)
    assert at == T0 + 100 + 300 + SETTLE_MARGIN
    assert timer.due(T0 + 400) is None  # the settle guard would still refuse every action
    assert timer.due(at) == "failover"
    assert timer.next_due() == (at, "failover")
    timer.scanned(at, at + 5)
    assert timer.due(at + 6) is None  # one scan only; then the interval again
    assert timer.next_due() == (at + 5 + 600, "interval")
    # The same term seen again schedules nothing.
    assert timer.observe_term(4, T0 + 100, at + 10) is None


def test_a_young_term_at_start_a_late_noticed_failover_and_an_unknown_start() -> None:
    timer = OrphanTimer.at_start(600.0, 300.0, T0)
    # The controller restarted 60 s before the daemon: the start scan cannot act, one more comes.
    assert timer.observe_term(2, T0 - 60, T0) == T0 + 240 + SETTLE_MARGIN
    timer.scanned(T0, T0 + 5)  # the start scan does not clear it: it ran inside the window
    assert timer.due(T0 + 240 + SETTLE_MARGIN) == "failover"
    timer.scanned(T0 + 242, T0 + 250)
    # A failover whose window passed while the link was away: the scan is due at once.
    assert timer.observe_term(3, T0 + 300, T0 + 900) == T0 + 900
    assert timer.due(T0 + 900) == "failover"
    timer.scanned(T0 + 900, T0 + 905)
    # A controller that does not say when its term started: the window counts from now.
    assert timer.observe_term(4, 0.0, T0 + 1000) == T0 + 1300 + SETTLE_MARGIN
    # A second failover inside the first one's window restarts it.
    assert timer.observe_term(5, T0 + 1100, T0 + 1100) == T0 + 1400 + SETTLE_MARGIN
    assert timer.next_due() == (T0 + 1400 + SETTLE_MARGIN, "failover")


def test_a_reload_moves_the_next_scans_by_the_new_settings() -> None:
    timer = OrphanTimer.at_start(600.0, 300.0, T0)
    timer.scanned(T0, T0 + 10)
    timer.observe_term(7, T0 + 20, T0 + 20)
    timer.reconfigure(120.0, 60.0)
    assert timer.next_at == T0 + 10 + 120
    assert timer.settle_at == T0 + 20 + 60 + SETTLE_MARGIN
    doc = timer.to_json()
    assert doc == {
        "interval": 120.0,
        "settle_window": 60.0,
        "term": 7,
        "next_scan": T0 + 20 + 60 + SETTLE_MARGIN,
        "next_reason": "failover",
        "failover_scan": T0 + 20 + 60 + SETTLE_MARGIN,
    }
