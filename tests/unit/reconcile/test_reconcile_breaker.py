"""The circuit breaker: opens after N failures in a window, resets, cools off, survives a restart."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from reconcile_support import FakeClock

from orchestrator.errors import FinalError
from orchestrator.model.config import BreakerSettings
from orchestrator.reconcile.breaker import BREAKERS_FILE, Breakers, Position

SETTINGS = BreakerSettings(failures=3, window=600, cool_off=3600)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_opens_after_n_failures_within_the_window(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    breakers.failure("cpu", "bootstrap", "h1: role failed", clock.now)
    clock.advance(601)  # the first failure leaves the window
    breakers.failure("cpu", "bootstrap", "h2: role failed", clock.now)
    breakers.failure("cpu", "join", "h3: not joined by join_deadline", clock.advance(1))
    assert breakers.allows("cpu", clock.now)
    state = breakers.failure("cpu", "bootstrap", "h4: role failed", clock.advance(1))
    assert state.position == Position.OPEN
    assert not breakers.allows("cpu", clock.now)
    assert breakers.allows("gpu", clock.now)  # per template
    evidence = state.evidence(clock.now, SETTINGS)
    assert (evidence["failures"], evidence["reopens_at"]) == (3, clock.now + 3600)
    assert "h4: role failed" in evidence["reason"]


def test_a_success_clears_the_count(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    for n in range(2):
        breakers.failure("cpu", "bootstrap", f"h{n}", clock.advance(1))
    breakers.success("cpu", clock.advance(1))
    breakers.failure("cpu", "bootstrap", "h9", clock.advance(1))
    assert breakers.allows("cpu", clock.now)


def test_reset_closes_it(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    for n in range(3):
        breakers.failure("cpu", "bootstrap", f"h{n}", clock.now)
    assert not breakers.allows("cpu", clock.now)
    breakers.reset("cpu")
    assert breakers.allows("cpu", clock.now)
    assert breakers.state("cpu").failures == ()
    assert Breakers.load(tmp_path, SETTINGS).states() == []


def test_cool_off_half_opens_then_the_next_outcome_decides(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    for n in range(3):
        breakers.failure("cpu", "bootstrap", f"h{n}", clock.now)
    clock.advance(3599)
    assert not breakers.allows("cpu", clock.now)
    clock.advance(1)
    assert breakers.state("cpu").position_at(clock.now, SETTINGS) == Position.HALF_OPEN
    assert breakers.allows("cpu", clock.now)
    # One failure after the cool-off reopens it at once, for a whole new cool-off.
    state = breakers.failure("cpu", "join", "probe not joined", clock.advance(5))
    assert (state.position, state.opened_at) == (Position.OPEN, clock.now)
    assert not breakers.allows("cpu", clock.advance(3000))
    # After the next cool-off a success closes it.
    clock.advance(700)
    assert breakers.success("cpu", clock.now).position == Position.CLOSED
    assert breakers.allows("cpu", clock.now)


def test_a_late_success_does_not_close_an_open_breaker(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    for n in range(3):
        breakers.failure("cpu", "bootstrap", f"h{n}", clock.now)
    breakers.success("cpu", clock.advance(10))  # a host requested before it opened joined
    assert not breakers.allows("cpu", clock.now)


def test_survives_a_restart_and_the_file_is_private(tmp_path: Path, clock: FakeClock) -> None:
    breakers = Breakers.load(tmp_path, SETTINGS)
    for n in range(3):
        breakers.failure("cpu", "bootstrap", f"h{n}", clock.now)
    breakers.failure("gpu", "join", "g1", clock.now)
    again = Breakers.load(tmp_path, SETTINGS)  # a new process
    assert not again.allows("cpu", clock.now)
    assert again.states() == breakers.states()
    assert len(again.state("gpu").failures) == 1
    path = tmp_path / BREAKERS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["breakers"]["cpu"]["position"] == "open"


def test_a_damaged_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / BREAKERS_FILE).write_text('{"format": 1, "breakers": {"cpu": {"position": "ajar"}}}')
    with pytest.raises(FinalError, match=r"breakers.json: not a breaker file .*remove it"):
        Breakers.load(tmp_path, SETTINGS)
