"""The daemon's bootstrap play as the metrics see it: one duration per host, by its outcome."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from orchestrator.daemon.bootstrapping import Bootstrapping
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.ops.executor.results import Created

HOSTS = [Created(f"op-a-00{i}", f"i-{i}", f"h{i}", f"10.0.0.{i}", "cpu", 0.0) for i in range(3)]


def count(metrics: DaemonMetrics, outcome: str) -> float | None:
    labels = {"provider": "sim", "outcome": outcome}
    return metrics.registry.get_sample_value("xceprov_bootstrap_duration_seconds_count", labels)


def test_each_host_of_a_play_is_observed_with_its_outcome() -> None:
    metrics = DaemonMetrics()
    seen: list[frozenset[str]] = []
    watched = Bootstrapping(metrics.bootstrap_played)

    def play(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        seen.append(watched.running()[provider])
        return {"h0": "ok", "h1": "failed: unreachable", "h2": "stopped: not finished: the daemon is stopping"}

    watched.around(play, lambda: None)("sim", HOSTS)
    assert seen == [frozenset(h.key for h in HOSTS)] and watched.running() == {}
    assert (count(metrics, "ok"), count(metrics, "failed"), count(metrics, "stopped")) == (1, 1, 1)


def test_a_play_that_raises_counts_each_host_failed() -> None:
    metrics = DaemonMetrics()

    def play(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        raise RuntimeError("ansible-runner died")

    with pytest.raises(RuntimeError):
        Bootstrapping(metrics.bootstrap_played).around(play, lambda: None)("sim", HOSTS)
    assert count(metrics, "failed") == 3
