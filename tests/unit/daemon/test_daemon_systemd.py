"""systemd: notification datagrams on a real AF_UNIX socket, the watchdog, and the unit file."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from orchestrator.daemon.systemd import Heartbeat, Notifier, WatchdogPinger, take_from_environment, watchdog_interval
from orchestrator.model.config import STOP_TIMEOUT
from tests.unit.daemon.daemon_helpers import NotifySocket

UNIT = Path(__file__).resolve().parents[3] / "contrib" / "systemd" / "xceprov.service"


def test_ready_status_reloading_stopping_datagrams(notify_socket: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    assert notifier.enabled
    assert notifier.ready("leases held: sim")
    assert notify_socket.receive() == {"READY": "1", "STATUS": "leases held: sim"}
    assert notifier.status("pass 3: 2 ops in flight\nforged=1")
    # A newline in a status text cannot add a key to the datagram.
    assert notify_socket.receive() == {"STATUS": "pass 3: 2 ops in flight forged=1"}
    assert notifier.reloading()
    got = notify_socket.receive()
    assert got["RELOADING"] == "1" and int(got["MONOTONIC_USEC"]) > 0
    assert notifier.stopping("stopping: 1 in flight")
    assert notify_socket.receive() == {"STOPPING": "1", "STATUS": "stopping: 1 in flight"}


def test_abstract_namespace_socket() -> None:
    name = f"xceprov-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        Notifier({"NOTIFY_SOCKET": f"@{name}"}).ready("up")
        sock.settimeout(10)
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.ready("up")
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_a_vanished_socket_does_not_stop_the_daemon(tmp_path: Path) -> None:
    assert not Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")}).ready("up")


def test_a_manager_that_stopped_reading_never_blocks_the_daemon(notify_socket: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    # The receiver's queue holds few datagrams (net.unix.max_dgram_qlen, 10 by default): a
    # blocking send would hang the loop at the first status after it filled up.
    sent = [notifier.status(f"pass {n}") for n in range(200)]
    assert sent[0] and not sent[-1]  # later ones were dropped, at once
    assert notify_socket.receive() == {"STATUS": "pass 0"}


def test_watchdog_interval_is_half_and_only_for_its_process() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "60000000"}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}, pid=4242) is None
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None


@pytest.mark.parametrize("usec", ["9" * 5000, "abc", "-5", "١٢٣", " 60000000", "1.5"])
def test_a_watchdog_variable_that_is_no_number_asks_for_no_watchdog(usec: str) -> None:
    assert watchdog_interval({"WATCHDOG_USEC": usec}) is None  # 5000 digits: was a ValueError at start


def test_a_watchdog_of_years_is_pinged_hourly() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "18446744073709551615"}) == 3600.0


def test_watchdog_pings_while_healthy(notify_socket: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    interval = watchdog_interval({"WATCHDOG_USEC": "100000"})
    assert interval == 0.05
    pinger = WatchdogPinger(notifier, interval)
    pinger.start()
    try:
        assert notify_socket.receive() == {"WATCHDOG": "1"}
        assert notify_socket.receive() == {"WATCHDOG": "1"}
    finally:
        pinger.stop()


def test_watchdog_withheld_while_unhealthy(notify_socket: NotifySocket) -> None:
    healthy = [False]
    pinger = WatchdogPinger(Notifier({"NOTIFY_SOCKET": notify_socket.env_value}), 30.0, lambda: healthy[0])
    assert not pinger.ping_once()
    assert notify_socket.nothing_waiting()
    healthy[0] = True
    assert pinger.ping_once()
    assert notify_socket.receive() == {"WATCHDOG": "1"}


def test_a_loop_that_stops_beating_loses_the_watchdog(notify_socket: NotifySocket) -> None:
    now = [100.0]
    heartbeat = Heartbeat(max_age=90.0, clock=lambda: now[0])
    pinger = WatchdogPinger(Notifier({"NOTIFY_SOCKET": notify_socket.env_value}), 30.0, heartbeat.healthy)
    now[0] = 150.0
    assert pinger.ping_once()
    assert notify_socket.receive() == {"WATCHDOG": "1"}
    now[0] = 191.0  # 91 s without a pass
    assert not pinger.ping_once()
    assert notify_socket.nothing_waiting()
    heartbeat.beat()
    assert pinger.ping_once()


def test_children_do_not_inherit_the_notify_variables(
    notify_socket: NotifySocket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.env_value)
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier, interval = take_from_environment()
    assert interval == 10.0
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(os.environ)
    assert notifier.ready("up")
    assert notify_socket.receive()["READY"] == "1"


def unit_settings() -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings[key] = value
    return settings


def test_unit_stop_bound_matches_the_documented_sigterm_bound() -> None:
    settings = unit_settings()
    assert settings["Type"] == "notify"
    assert settings["ExecStart"].endswith("/xceprov daemon")
    assert settings["KillSignal"] == "SIGTERM"
    assert settings["Restart"] == "on-failure"
    assert "WatchdogSec" in settings
    stop = re.fullmatch(r"(\d+)s", settings["TimeoutStopSec"])
    assert stop is not None
    # systemd's SIGKILL must come after the daemon's own bound, with room to release leases.
    assert int(stop.group(1)) == STOP_TIMEOUT + 30
    for option in (
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "NoNewPrivileges",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "RestrictSUIDSGID",
        "LockPersonality",
        "ReadWritePaths",
    ):
        assert option in settings, option
    assert settings["ProtectSystem"] == "strict"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (Debian: systemd)"
)
def test_unit_file_verifies(tmp_path: Path) -> None:
    # verify also checks that ExecStart's program exists: the test machine has no installed
    # xceprov at /usr/local/bin, so the copy names an executable that exists.
    stand_in = shutil.which("true")
    assert stand_in is not None
    text = UNIT.read_text().replace("ExecStart=/usr/local/bin/xceprov", f"ExecStart={stand_in}")
    assert text != UNIT.read_text()
    unit = tmp_path / "xceprov.service"
    unit.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "xceprov.service" not in result.stderr, result.stderr  # no warning about our unit
