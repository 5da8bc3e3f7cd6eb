"""Metrics: their own registry, the names of issue 10, an endpoint that is off unless configured."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.daemon.metrics import DaemonMetrics, OpKind, OpOutcome, start_endpoint
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.errors import ConfigError
from orchestrator.model.config import MetricsSettings


def scrape(host: str, port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the endpoint serves, by name and labels."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def filled() -> DaemonMetrics:
    metrics = DaemonMetrics()
    metrics.op_finished("sim", OpKind.CREATE, OpOutcome.SUCCEEDED)
    metrics.op_finished("sim", OpKind.CREATE, OpOutcome.SUCCEEDED)
    metrics.op_finished("sim", OpKind.RETURN, OpOutcome.PARKED)
    metrics.set_instances("sim", {"running": 4, "joined": 3})
    metrics.set_lease("sim", valid=True, remaining_s=7.5)
    metrics.set_lease("aws", valid=False, remaining_s=3.0)
    metrics.pass_finished(ended_at=1_700_000_000.0, duration_s=0.3)
    metrics.set_breaker("gpu", is_open=True)
    metrics.timeout_passed("sim", NamedTimeout.JOIN_DEADLINE)
    return metrics


def test_scraped_names_and_values() -> None:
    endpoint = start_endpoint(MetricsSettings(listen="127.0.0.1:0"), filled(), "site.yaml")
    assert endpoint is not None
    try:
        host, port = endpoint.address
        assert host == "127.0.0.1" and port > 0
        got = scrape(host, port)
    finally:
        endpoint.stop()
    assert got[("xceprov_ops_total", (("kind", "create"), ("outcome", "succeeded"), ("provider", "sim")))] == 2
    assert got[("xceprov_ops_total", (("kind", "return"), ("outcome", "parked"), ("provider", "sim")))] == 1
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "running")))] == 4
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "joined")))] == 3
    assert got[("xceprov_lease_valid", (("provider", "sim"),))] == 1
    assert got[("xceprov_lease_remaining_seconds", (("provider", "sim"),))] == 7.5
    # An invalid lease has no remaining validity, whatever the caller computed.
    assert got[("xceprov_lease_valid", (("provider", "aws"),))] == 0
    assert got[("xceprov_lease_remaining_seconds", (("provider", "aws"),))] == 0
    assert got[("xceprov_reconcile_last_pass_timestamp_seconds", ())] == 1_700_000_000.0
    assert got[("xceprov_reconcile_pass_duration_seconds_count", ())] == 1
    assert got[("xceprov_reconcile_pass_duration_seconds_sum", ())] == pytest.approx(0.3)
    assert got[("xceprov_reconcile_pass_duration_seconds_bucket", (("le", "0.5"),))] == 1
    assert got[("xceprov_reconcile_pass_duration_seconds_bucket", (("le", "0.25"),))] == 0
    assert got[("xceprov_breaker_open", (("template", "gpu"),))] == 1
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "join_deadline")))] == 1
    # Nothing of the process-wide default registry leaks into the daemon's endpoint.
    assert not any(name.startswith(("process_", "python_gc_", "python_info")) for name, _ in got)


def test_a_state_no_longer_present_reads_zero() -> None:
    metrics = DaemonMetrics()
    metrics.set_instances("sim", {"running": 4, "draining": 1})
    metrics.set_instances("sim", {"running": 2})
    assert metrics.registry.get_sample_value("xceprov_instances", {"provider": "sim", "state": "draining"}) == 0
    assert metrics.registry.get_sample_value("xceprov_instances", {"provider": "sim", "state": "running"}) == 2


def test_registries_are_separate() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()
    first.op_finished("sim", OpKind.CREATE, OpOutcome.FAILED)
    labels = {"provider": "sim", "kind": "create", "outcome": "failed"}
    assert first.registry.get_sample_value("xceprov_ops_total", labels) == 1
    assert second.registry.get_sample_value("xceprov_ops_total", labels) is None
    assert REGISTRY.get_sample_value("xceprov_ops_total", labels) is None


def test_off_by_default_opens_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    real = socket.socket

    def counting(*args: object, **kwargs: object) -> socket.socket:
        opened.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]  # socket.socket's own signature

    monkeypatch.setattr(socket, "socket", counting)
    assert start_endpoint(MetricsSettings(), filled(), "site.yaml") is None
    assert opened == []


def test_an_address_in_use_is_one_line_naming_the_key() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError) as info:
            start_endpoint(MetricsSettings(listen=f"127.0.0.1:{port}"), DaemonMetrics(), "site.yaml")
    finally:
        holder.close()
    (line,) = info.value.problems
    assert line.startswith(f"site.yaml: daemon.metrics.listen: cannot listen on 127.0.0.1:{port}: ")
