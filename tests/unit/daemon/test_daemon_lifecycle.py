"""Signals in a real child process: SIGHUP reloads or keeps the last good configuration, SIGTERM stops."""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon.lifecycle import EXIT_STOP_TIMEOUT, Lifecycle, Stopping
from orchestrator.daemon.systemd import Notifier
from tests.unit.daemon.daemon_helpers import NotifySocket, loaded, site_text

CHILD = Path(__file__).with_name("lifecycle_child.py")
ROOT = Path(__file__).resolve().parents[3]


class Child:
    """The stand-in daemon, its stdout read line by line, its log in a file."""

    def __init__(self, config: Path, mode: str, log: Path, notify: NotifySocket) -> None:
        env = {**os.environ, "NOTIFY_SOCKET": notify.env_value, "PYTHONPATH": str(ROOT)}
        self.log = log
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(config), mode],
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)

    def line(self, timeout: float = 30.0) -> str:
        """The next line the child printed (the child prints whole lines, flushed)."""
        assert self.proc.stdout is not None
        if not self._selector.select(timeout):
            raise AssertionError(f"no output within {timeout}s; log:\n{self.log.read_text()}")
        return self.proc.stdout.readline().rstrip("\n")

    def wait_for(self, wanted: str) -> list[str]:
        """Lines up to and including ``wanted``."""
        seen = []
        while (line := self.line()) != wanted:
            assert line, f"child ended before {wanted!r}: {seen}; log:\n{self.log.read_text()}"
            seen.append(line)
        return [*seen, line]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log_file.close()


@pytest.fixture
def start(tmp_path: Path, notify_socket: NotifySocket) -> Iterator[Callable[[Path, str], Child]]:
    children: list[Child] = []

    def run(config: Path, mode: str) -> Child:
        child = Child(config, mode, tmp_path / f"child-{len(children)}.log", notify_socket)
        children.append(child)
        return child

    try:
        yield run
    finally:
        for child in children:
            child.close()


def test_sighup_keeps_the_last_good_configuration_and_sigterm_exits_0(
    tmp_path: Path, start: Callable[[Path, str], Child], notify_socket: NotifySocket
) -> None:
    config = tmp_path / "xceprov.yaml"
    config.write_text(site_text("first", "{stop_timeout: 30s}"))
    child = start(config, "park")
    child.wait_for("ready")
    assert notify_socket.receive()["READY"] == "1"

    config.write_text(
        site_text("second", "{stop_timeout: 30s}").replace("module: xcesim", "module: xcesim, priorty: 3")
    )
    child.proc.send_signal(signal.SIGHUP)
    first = "cluster=first stop_timeout=30"
    assert child.wait_for(first) == [first]  # no reload callback ran

    # The cluster takes effect at the next start; the stop bound at once.
    config.write_text(site_text("second", "{stop_timeout: 20s}"))
    child.proc.send_signal(signal.SIGHUP)
    second = "cluster=first stop_timeout=20"
    assert child.wait_for(second) == [f"reloaded {second}", second]

    child.proc.send_signal(signal.SIGTERM)
    rest = child.wait_for("leases released")
    assert child.proc.wait(timeout=60) == 0
    assert "op-1 parked" in rest and "op-2 refused" in rest and "op-2 started" not in rest

    # Bytes that are not text are not the daemon's (once a stray TLS record from another test's
    # socket in this worker landed in the file whose descriptor number it had): judge its lines.
    log = child.log.read_bytes().decode("utf-8", errors="replace").splitlines()
    refused = [line for line in log if "configuration not reloaded" in line]
    assert len(refused) == 1, log
    assert (
        f"keeping the last good one: {config}: providers.sim.priorty: unknown key (did you mean 'priority'?)"
        in refused[0]
    )
    assert any(f"SIGHUP: configuration reloaded from {config}" in line for line in log)
    assert any("SIGTERM: stopping: no new op; in-flight work (op-1) has stop_timeout 20s" in line for line in log)
    kept = [line for line in log if "changed in" in line]
    assert len(kept) == 1 and kept[0].endswith(
        f"SIGHUP: cluster changed in {config}: it takes effect at the next start; the daemon keeps 'first'"
    ), log
    sent = notify_socket.drain()
    assert {"STOPPING": "1", "STATUS": "stopping: 1 in flight"} in sent
    assert any(d.get("RELOADING") == "1" for d in sent)
    assert any(d.get("STATUS", "").startswith("reload refused: ") for d in sent)


def test_sigterm_with_work_past_the_bound_exits_non_zero_naming_it(
    tmp_path: Path, start: Callable[[Path, str], Child]
) -> None:
    config = tmp_path / "xceprov.yaml"
    config.write_text(site_text("first", "{stop_timeout: 500ms}"))
    child = start(config, "stuck")
    child.wait_for("ready")
    child.proc.send_signal(signal.SIGTERM)
    rest = child.wait_for("leases released")
    assert "op-2 refused" in rest and "op-1 parked" not in rest
    assert child.proc.wait(timeout=60) == EXIT_STOP_TIMEOUT
    log = child.log.read_text()
    assert "stop_timeout 0.5s passed with work in flight (op-1): exiting anyway" in log


def test_reload_keeps_each_restart_only_key_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    current = loaded("{metrics: {listen: '127.0.0.1:9477'}, log_format: text, reconcile_interval: 30s}")
    text = site_text("site2", "{metrics: {listen: '127.0.0.1:9478'}, log_format: json, reconcile_interval: 5s}")
    text += "state_dir: /srv/elsewhere\ncontroller: {ca: system, addresses: ['10.0.0.9:7441']}\n"
    lifecycle = Lifecycle(current, lambda: parse_config(text, "site.yaml", Path("/srv/site")))
    seen: list[LoadedConfig] = []
    lifecycle.on_reload(seen.append)
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon.lifecycle"):
        assert lifecycle.reload()
    in_force = lifecycle.config.config
    assert seen == [lifecycle.config]
    # Everything else reloads ...
    assert in_force.daemon.reconcile_interval == 5.0
    # ... the restart-only keys keep what the daemon started with.
    assert in_force.cluster == "site1" and in_force.state_dir == current.config.state_dir
    assert in_force.controller == current.config.controller and in_force.daemon.log_format == "text"
    assert in_force.daemon.metrics.listen == "127.0.0.1:9477"
    kept = [r.getMessage() for r in caplog.records if "takes effect at the next start" in r.getMessage()]
    tail = "it takes effect at the next start; the daemon keeps"
    assert kept == [
        f"SIGHUP: cluster changed in site.yaml: {tail} 'site1'",
        f"SIGHUP: state_dir changed in site.yaml: {tail} '{current.config.state_dir}'",
        f"SIGHUP: controller changed in site.yaml: {tail} its previous settings",
        f"SIGHUP: daemon.log_format changed in site.yaml: {tail} 'text'",
        f"SIGHUP: daemon.metrics changed in site.yaml: {tail} its previous settings",
    ]
    # The same file again: the running values still differ from it, and the log says so again.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon.lifecycle"):
        assert lifecycle.reload()
    assert lifecycle.config.config.cluster == "site1"
    assert len([r for r in caplog.records if "takes effect at the next start" in r.getMessage()]) == 5


def _notified(notify_socket: NotifySocket) -> list[dict[str, str]]:
    return [{k: v for k, v in d.items() if k != "MONOTONIC_USEC"} for d in notify_socket.drain()]


def test_a_reload_that_cannot_be_applied_keeps_the_previous_one_and_still_says_ready(
    notify_socket: NotifySocket, caplog: pytest.LogCaptureFixture
) -> None:
    current = loaded("{reconcile_interval: 30s}")
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    lifecycle = Lifecycle(current, lambda: loaded("{reconcile_interval: 5s}"), notifier)
    lifecycle.started()
    seen: list[float] = []

    def broken(_new: LoadedConfig) -> None:
        raise RuntimeError("applying exploded")

    lifecycle.on_reload(lambda new: seen.append(new.config.daemon.reconcile_interval))
    lifecycle.on_reload(broken)
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon.lifecycle"):
        assert not lifecycle.reload()
    assert lifecycle.config is current
    assert seen == [5.0, 30.0]  # the part that took it got the previous configuration back
    assert _notified(notify_socket) == [
        {"RELOADING": "1"},
        {"READY": "1", "STATUS": "reload failed: RuntimeError: applying exploded"},
    ]
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failed) == 1 and failed[0].startswith("SIGHUP: the configuration from site.yaml could not be applied")
    assert failed[0].endswith("RuntimeError: applying exploded), keeping the previous one")


def test_a_reload_whose_file_cannot_be_read_keeps_the_previous_one_and_still_says_ready(
    notify_socket: NotifySocket,
) -> None:
    current = loaded()

    def unreadable() -> LoadedConfig:
        raise PermissionError(13, "Permission denied", "/etc/xceprov/xceprov.yaml")

    lifecycle = Lifecycle(current, unreadable, Notifier({"NOTIFY_SOCKET": notify_socket.env_value}))
    lifecycle.started()
    assert not lifecycle.reload()
    assert lifecycle.config is current
    assert _notified(notify_socket) == [
        {"RELOADING": "1"},
        {
            "READY": "1",
            "STATUS": "reload failed: PermissionError: [Errno 13] Permission denied: '/etc/xceprov/xceprov.yaml'",
        },
    ]


def test_a_reload_before_the_start_is_over_sends_no_ready(notify_socket: NotifySocket) -> None:
    lifecycle = Lifecycle(
        loaded(), lambda: loaded("{reconcile_interval: 5s}"), Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    )
    # systemd would take this READY=1 for the end of the start (the first pass not done yet).
    assert lifecycle.reload()
    assert _notified(notify_socket) == [{"STATUS": "configuration reloaded from site.yaml"}]
    lifecycle.started()
    assert lifecycle.reload()
    assert _notified(notify_socket) == [
        {"RELOADING": "1"},
        {"READY": "1", "STATUS": "configuration reloaded from site.yaml"},
    ]


def test_no_new_work_once_stopping() -> None:
    lifecycle = Lifecycle(loaded(), loaded)
    with lifecycle.in_flight("op-1"):
        assert not lifecycle.should_stop()
    lifecycle.request_stop("SIGTERM")
    assert lifecycle.should_stop()
    assert not lifecycle.wait(0)
    with pytest.raises(Stopping, match="not starting op-2: the daemon is stopping"), lifecycle.in_flight("op-2"):
        pass
    assert lifecycle.shutdown() == 0
