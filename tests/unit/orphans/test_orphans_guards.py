"""The guards' own rules: the settle window, the protect tag, launch times, the persisted rate limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from orphan_support import NOW
from tffake import site_config

from orchestrator.clients.controller.types import ControllerStatus, DemandSnapshot, HostInfo
from orchestrator.errors import FinalError
from orchestrator.model.config import OrphanSettings
from orchestrator.orphans.guards import launched_at, protected, settle
from orchestrator.orphans.inputs import ControllerRead
from orchestrator.orphans.limits import ACTIONS_FILE, Breaker, RateLimit


def read(term_started: float, hosts: list[HostInfo] | None = None) -> ControllerRead:
    status = ControllerStatus("c", 2, "", (), DemandSnapshot(0), (), term_started=term_started)
    return ControllerRead(status=status, hosts=hosts or [])


def test_the_settle_window_needs_the_time_and_every_joined_worker_back(tmp_path: Path) -> None:
    config = site_config(tmp_path).config  # settle_window 300 s
    assert settle(config, read(0.0), "sim", NOW).passed is False  # the term start is not reported
    assert "does not report" in settle(config, read(0.0), "sim", NOW).reason
    assert settle(config, read(NOW - 299), "sim", NOW).passed is False
    back = settle(config, read(NOW - 301), "sim", NOW)
    assert back.passed is True and back.to_json()["term"] == 2
    waiting = [HostInfo("h1", "disconnected", provider="sim", joined_at=NOW - 900)]
    assert settle(config, read(NOW - 301, waiting), "sim", NOW).passed is False
    # A worker of another provider does not hold this one's window.
    assert settle(config, read(NOW - 301, waiting), "aws", NOW).passed is True
    assert settle(config, ControllerRead(error="unreachable"), "sim", NOW).passed is False


def test_protect_tag_and_launch_times() -> None:
    assert protected({"xce:protect": "true"}) and protected({"xce:protect": "yes"})
    assert not protected({"xce:protect": "False"}) and not protected({})
    assert launched_at("2027-01-15T08:00:00Z") == NOW
    assert launched_at("") is None and launched_at("yesterday") is None


def test_the_rate_limit_persists_and_a_damaged_file_is_named(tmp_path: Path) -> None:
    settings = OrphanSettings(max_cleanup_per_interval=2, interval=600)
    rate = RateLimit(tmp_path, settings, NOW)
    rate.take("sim")
    rate.take("sim")
    assert RateLimit(tmp_path, settings, NOW + 10).remaining("sim") == 0
    assert RateLimit(tmp_path, settings, NOW + 10).remaining("aws") == 2
    assert RateLimit(tmp_path, settings, NOW + 601).remaining("sim") == 2  # the window moved on
    (tmp_path / ACTIONS_FILE).write_text('{"format": 1, "actions": {"sim": ["x"]}}')
    with pytest.raises(FinalError, match="not an orphan actions file") as err:
        RateLimit(tmp_path, settings, NOW)
    assert str(tmp_path / ACTIONS_FILE) in str(err.value)


def test_the_breaker_opens_on_a_share_above_its_minimum() -> None:
    assert Breaker(3, 4, 0.5, 3).open and not Breaker(2, 4, 0.5, 3).open
    assert not Breaker(3, 6, 0.5, 3).open and Breaker(4, 6, 0.5, 3).open
    assert Breaker(1, 0, 0.5, 1).open  # instances unknown: one finding is all there is
