"""Metrics: their own registry, the names of issue 10, an endpoint that is off unless configured."""

from __future__ import annotations

import contextlib
import importlib.metadata
import select
import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.daemon.metrics import DaemonMetrics, OpKind, OpOutcome, daemon_version, start_endpoint
from orchestrator.daemon.metrics_http import ServerLimits
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
    metrics.op_finished("sim", OpKind.CREATE, OpOutcome.SUCCEEDED, 12.0)
    metrics.op_finished("sim", OpKind.CREATE, OpOutcome.SUCCEEDED, 50.0)
    metrics.op_finished("sim", OpKind.RETURN, OpOutcome.PARKED, 3.0)
    metrics.bootstrap_played("sim", ["ok", "failed: unreachable", "ok"], 95.0)
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
    # Op and bootstrap durations are histograms (one observation per op; per host of a play).
    create = (("kind", "create"), ("outcome", "succeeded"), ("provider", "sim"))
    assert got[("xceprov_op_duration_seconds_count", create)] == 2
    assert got[("xceprov_op_duration_seconds_sum", create)] == 62
    assert got[("xceprov_op_duration_seconds_bucket", tuple(sorted((*create, ("le", "30.0")))))] == 1
    assert got[("xceprov_bootstrap_duration_seconds_count", (("outcome", "ok"), ("provider", "sim")))] == 2
    assert got[("xceprov_bootstrap_duration_seconds_count", (("outcome", "failed"), ("provider", "sim")))] == 1
    ok_under_a_minute = (("le", "60.0"), ("outcome", "ok"), ("provider", "sim"))
    assert got[("xceprov_bootstrap_duration_seconds_bucket", ok_under_a_minute)] == 0
    # The process collector is the daemon's own; the platform and GC collectors of the default
    # registry are not exported, nor any `_created` series.
    assert got[("process_resident_memory_bytes", ())] > 0
    assert not any(name.startswith(("python_gc_", "python_info")) for name, _ in got)
    assert not any(name.endswith("_created") for name, _ in got)


def test_a_state_no_longer_present_reads_zero() -> None:
    metrics = DaemonMetrics()
    metrics.set_instances("sim", {"running": 4, "draining": 1})
    metrics.set_instances("sim", {"running": 2})
    assert metrics.registry.get_sample_value("xceprov_instances", {"provider": "sim", "state": "draining"}) == 0
    assert metrics.registry.get_sample_value("xceprov_instances", {"provider": "sim", "state": "running"}) == 2


def test_costs_budgets_and_backoff_read_as_a_whole() -> None:
    metrics = DaemonMetrics()
    metrics.set_costs({("sim", "cpu"): 0.68, ("sim", "gpu"): 3.06})
    metrics.set_costs({("sim", "cpu"): 0.34})
    cost = metrics.registry.get_sample_value
    assert cost("xceprov_cost_per_hour", {"provider": "sim", "template": "cpu"}) == 0.34
    assert cost("xceprov_cost_per_hour", {"provider": "sim", "template": "gpu"}) == 0  # none runs now
    metrics.set_budgets("site1", 10.0, {"sim": 5.0, "aws": None})
    assert cost("xceprov_cluster_budget_per_hour", {"cluster": "site1"}) == 10
    assert cost("xceprov_provider_budget_per_hour", {"provider": "sim"}) == 5
    assert cost("xceprov_provider_budget_per_hour", {"provider": "aws"}) is None  # no budget: no cap
    metrics.set_budgets("site1", None, {"sim": None})  # a reload removed both: their series go
    assert cost("xceprov_cluster_budget_per_hour", {"cluster": "site1"}) is None
    assert cost("xceprov_provider_budget_per_hour", {"provider": "sim"}) is None
    metrics.set_backoff([("sim", "*")], [("sim", "cpu")])
    assert cost("xceprov_provider_backoff", {"provider": "sim", "template": "cpu"}) == 1
    assert cost("xceprov_provider_backoff", {"provider": "sim", "template": "*"}) == 0
    metrics.set_backoff([("sim", "*")], [])  # the block ended
    assert cost("xceprov_provider_backoff", {"provider": "sim", "template": "cpu"}) == 0


def test_registries_are_separate() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()
    first.op_finished("sim", OpKind.CREATE, OpOutcome.FAILED, 1.0)
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


def closed_by_the_server(clients: list[socket.socket], within: float) -> list[socket.socket]:
    """The ``clients`` the server closed (they read end-of-file) before ``within`` seconds passed."""
    deadline = time.monotonic() + within
    open_ = set(clients)
    while open_ and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(list(open_), [], [], min(left, 1.0))
        for sock in readable:
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""  # the server sends nothing to a connection that asked nothing
            open_.discard(sock)
    return [c for c in clients if c not in open_]


def test_idle_connections_hold_no_thread_are_closed_after_the_read_timeout_and_a_scrape_goes_through() -> None:
    limits = ServerLimits(max_connections=32, read_timeout=2.0)
    before = threading.active_count()
    endpoint = start_endpoint(MetricsSettings(listen="127.0.0.1:0"), filled(), "site.yaml", limits)
    assert endpoint is not None
    idle: list[socket.socket] = []
    try:
        host, port = endpoint.address
        for _ in range(300):  # connect, send nothing: half-open as far as the server can tell
            idle.append(socket.create_connection((host, port), timeout=10))
        slow = socket.create_connection((host, port), timeout=10)
        idle.append(slow)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # a request that never ends
        # Bounded: the reading thread and the answering ones, however many connections wait.
        assert threading.active_count() <= before + 1 + limits.workers
        got = scrape(host, port)  # meanwhile, a real scrape is answered
        assert got[("xceprov_lease_valid", (("provider", "sim"),))] == 1
        assert threading.active_count() <= before + 1 + limits.workers
        # Every idle connection is closed by the server: the oldest as the cap is passed, the
        # rest when read_timeout passes (the bound here only keeps a broken server from hanging).
        assert closed_by_the_server(idle, within=60) == idle
    finally:
        for sock in idle:
            sock.close()
        endpoint.stop()
    assert threading.active_count() <= before  # every thread of the endpoint ended with it


def test_the_exposition_is_prometheus_clients_own() -> None:
    endpoint = start_endpoint(MetricsSettings(listen="127.0.0.1:0"), filled(), "site.yaml")
    assert endpoint is not None
    try:
        host, port = endpoint.address
        request = urllib.request.Request(
            f"http://{host}:{port}/metrics?name[]=xceprov_breaker_open",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.headers["Content-Type"].startswith("application/openmetrics-text")
            text = reply.read().decode()
        assert 'xceprov_breaker_open{template="gpu"} 1.0' in text and "xceprov_ops" not in text
        assert text.endswith("# EOF\n")
        with socket.create_connection((host, port), timeout=10) as raw:
            raw.sendall(b"garbage\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.0 400 ")
    finally:
        endpoint.stop()


def test_build_info_link_and_reload_read_what_the_daemon_tells_them() -> None:
    metrics = DaemonMetrics()
    metrics.started("1.2.3", at=1_700_000_000.0)
    connected = [True]
    metrics.watch_link(lambda: connected[0])
    registry = metrics.registry
    assert registry.get_sample_value("xceprov_build_info", {"version": "1.2.3"}) == 1
    # The configuration loaded at start counts as the last reload, taken.
    assert registry.get_sample_value("xceprov_config_last_reload_successful") == 1
    assert registry.get_sample_value("xceprov_config_last_reload_timestamp_seconds") == 1_700_000_000.0
    # The link's state is read at each scrape, not at the last pass.
    assert registry.get_sample_value("xceprov_controller_link_up") == 1
    connected[0] = False
    assert registry.get_sample_value("xceprov_controller_link_up") == 0
    metrics.reload_finished(False, at=1_700_000_100.0)
    assert registry.get_sample_value("xceprov_config_last_reload_successful") == 0
    assert registry.get_sample_value("xceprov_config_last_reload_timestamp_seconds") == 1_700_000_100.0


def test_the_installed_version_is_the_build_info() -> None:
    assert daemon_version() == importlib.metadata.version("xce-provisioner")


def test_the_shared_store_gauge_exists_only_with_a_store_and_reads_it_at_each_scrape() -> None:
    metrics = DaemonMetrics()
    assert metrics.registry.get_sample_value("xceprov_shared_store_up") is None  # local backend: no series
    answering = [True]
    metrics.watch_store(lambda: answering[0])
    assert metrics.registry.get_sample_value("xceprov_shared_store_up") == 1
    answering[0] = False
    assert metrics.registry.get_sample_value("xceprov_shared_store_up") == 0
