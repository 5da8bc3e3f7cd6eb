"""The benchmark's timed ``xcesim`` provider: counts and seconds per store call, as JSON lines."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from tf.iface import CreateContext
from tf.utils import Diagnostics

from orchestrator.clients.terraform.mirror import XCESIM
from orchestrator.sim.cloud.provider import InstanceResource

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.xcesim_timed import TIMED_XCESIM, TimedProvider


@pytest.fixture
def provider(tmp_path: Path) -> TimedProvider:
    p = TimedProvider()
    diags = Diagnostics()
    p.configure_provider(diags, {"store": str(tmp_path / "cloud.sqlite"), "max_retries": None})
    assert not diags.has_errors()
    return p


def _planned(token: str) -> dict[str, object]:
    return {
        "name": token,
        "flavor": "c8.large",
        "image": "debian-12",
        "tags": {"xce:cluster": "bench"},
        "user_data": "",
        "client_token": token,
        "id": None,
    }


def test_calls_are_counted_and_written_as_json_lines(provider: TimedProvider, tmp_path: Path) -> None:
    res = InstanceResource(provider)
    diags = Diagnostics()
    for i in range(3):
        assert res.create(CreateContext(diags, "t"), _planned(f"s{i}")) is not None
    out = tmp_path / "stats.jsonl"
    provider.write_stats(str(out))
    provider.write_stats(str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["calls"]["create"]["n"] == 3
    assert lines[0]["calls"]["create"]["seconds"] >= 0


def test_failed_calls_count_too(provider: TimedProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    def locked(*_a: object, **_k: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(provider.store, "create_instance", locked)
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned("x")) is None
    assert diags.diagnostics[-1].summary.startswith("RequestLimitExceeded")
    assert provider.stats["create"][0] == 1


def test_nothing_is_written_without_calls(tmp_path: Path) -> None:
    out = tmp_path / "stats.jsonl"
    TimedProvider().write_stats(str(out))
    assert not out.exists()


def test_the_timed_provider_takes_the_plain_providers_address() -> None:
    assert TIMED_XCESIM.source == XCESIM.source and TIMED_XCESIM.version == XCESIM.version
    assert TIMED_XCESIM.module != XCESIM.module
