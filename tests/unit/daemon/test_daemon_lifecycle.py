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

from orchestrator.configfile import LoadedConfig
from orchestrator.daemon.lifecycle import EXIT_STOP_TIMEOUT, Lifecycle, Stopping
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
    assert child.wait_for("cluster=first") == ["cluster=first"]  # no reload callback ran

    config.write_text(site_text("second", "{stop_timeout: 30s}"))
    child.proc.send_signal(signal.SIGHUP)
    assert child.wait_for("cluster=second") == ["reloaded cluster=second", "cluster=second"]

    child.proc.send_signal(signal.SIGTERM)
    rest = child.wait_for("leases released")
    assert child.proc.wait(timeout=60) == 0
    assert "op-1 parked" in rest and "op-2 refused" in rest and "op-2 started" not in rest

    log = child.log.read_text().splitlines()
    refused = [line for line in log if "configuration not reloaded" in line]
    assert len(refused) == 1, log
    assert (
        f"keeping the last good one: {config}: providers.sim.priorty: unknown key (did you mean 'priority'?)"
        in refused[0]
    )
    assert any(f"SIGHUP: configuration reloaded from {config}" in line for line in log)
    assert any("SIGTERM: stopping: no new op; in-flight work (op-1) has stop_timeout 30s" in line for line in log)
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


def test_reload_says_which_settings_wait_for_a_restart(caplog: pytest.LogCaptureFixture) -> None:
    current = loaded("{metrics: {listen: '127.0.0.1:9477'}}")
    lifecycle = Lifecycle(current, lambda: loaded("{metrics: {listen: '127.0.0.1:9478'}}", cluster="site2"))
    seen: list[str] = []

    def broken(_new: LoadedConfig) -> None:
        raise RuntimeError("subscriber bug")

    lifecycle.on_reload(broken)
    lifecycle.on_reload(lambda new: seen.append(new.config.cluster))
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon.lifecycle"):
        assert lifecycle.reload()
    assert lifecycle.config.config.cluster == "site2"
    assert seen == ["site2"]  # a failing subscriber does not keep the others from the new configuration
    messages = [r.getMessage() for r in caplog.records]
    assert "SIGHUP: daemon.metrics changed in site.yaml: it takes effect at the next start" in messages
    assert any(m.startswith("SIGHUP: reload callback") and "broken" in m for m in messages)


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
