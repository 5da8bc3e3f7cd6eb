"""Node manager supervision with a stand-in worker process (no controller needed)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.sim.nodemanager.config import ConfigProblem, parse, read_join_token
from orchestrator.sim.nodemanager.manager import NodeManager, Restart

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def write_config(path: Path, roles: list[str]) -> None:
    path.write_text(
        json.dumps(
            {
                "roles": roles,
                "controller": {"addresses": ["127.0.0.1:7441"], "ca_file": "/etc/xce/ca.pem"},
                "template": "cpu",
                "host_name": "cpu-1",
                "instance_key": "op-00000001-abcdef-000",
            }
        )
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[NodeManager]:
    cfg = tmp_path / "node-manager.json"
    write_config(cfg, ["worker"])
    nm = NodeManager(cfg, state_file=tmp_path / "state.json", worker_argv=lambda _: SLEEPER, stop_grace=5)
    nm.clock = FakeClock()
    try:
        yield nm
    finally:
        nm.shutdown()


def wait_exit(nm: NodeManager) -> None:
    assert nm.worker is not None
    nm.worker.wait(10)


def test_starts_the_worker_role_and_writes_state(manager: NodeManager, tmp_path: Path) -> None:
    assert manager.reload(force=True)
    assert manager.worker is not None and manager.worker.poll() is None
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["worker_pid"] == manager.worker.pid and state["roles"] == ["worker"]
    assert manager.config is not None and manager.config.instance_id == "op-00000001-abcdef-000"


def test_restarts_a_dead_worker_with_backoff(manager: NodeManager) -> None:
    clock = manager.clock
    assert isinstance(clock, FakeClock)
    manager.reload(force=True)
    assert manager.worker is not None
    first = manager.worker.pid
    manager.worker.kill()
    wait_exit(manager)
    manager.poll()
    assert manager.worker is None and manager.restart_at == pytest.approx(0.5)
    clock.now = 0.6
    manager.poll()
    assert manager.worker is not None and manager.worker.pid != first
    assert manager.restarts == 1


def test_dropping_the_role_stops_the_worker_and_it_is_not_restarted(manager: NodeManager) -> None:
    manager.reload(force=True)
    worker = manager.worker
    assert worker is not None
    write_config(manager.config_path, [])
    assert manager.reload(force=True)
    assert manager.worker is None and worker.poll() is not None
    clock = manager.clock
    assert isinstance(clock, FakeClock)
    clock.now = 1000
    manager.poll()
    assert manager.worker is None and manager.restarts == 0


def test_timer_reload_notices_a_changed_file(manager: NodeManager) -> None:
    manager.reload(force=True)
    assert not manager.reload()  # unchanged
    write_config(manager.config_path, ["worker", "provisioner"])
    assert manager.reload()
    assert manager.config is not None and manager.config.roles == ("worker", "provisioner")


def test_a_broken_file_keeps_the_running_worker(manager: NodeManager) -> None:
    manager.reload(force=True)
    worker = manager.worker
    manager.config_path.write_text("{ half written")
    assert not manager.reload(force=True)
    assert manager.worker is worker and worker is not None and worker.poll() is None


def test_restart_delays_grow_and_reset() -> None:
    r = Restart()
    assert [r.delay(1, False) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert r.delay(120, False) == 0.5
    assert r.delay(1, True) == 30


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "top level"),
        ('{"roles": "worker"}', "roles must be a list"),
        ('{"roles": [], "controller": {"addresses": []}}', "addresses"),
        ('{"roles": [], "controller": {"addresses": ["nope"]}}', "not host:port"),
        ('{"roles": [], "controller": {"addresses": ["h:1"]}}', "ca_file"),
        ('{"roles": [], "controller": {"addresses": ["h:1"], "ca_file": "c"}}', "template"),
        ("nope", "not valid JSON"),
    ],
)
def test_config_problems_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigProblem, match=message):
        parse(text)


def test_pidfile_refuses_a_second_live_instance(tmp_path: Path) -> None:
    import subprocess

    from orchestrator.sim.nodemanager.manager import write_pidfile

    pidfile = tmp_path / "nm.pid"
    write_pidfile(pidfile)
    proc = subprocess.Popen(SLEEPER)
    try:
        pidfile.write_text(f"{proc.pid}\n")
        with pytest.raises(SystemExit, match="already running"):
            write_pidfile(pidfile)
    finally:
        proc.kill()
        proc.wait()
    write_pidfile(pidfile)  # a stale pidfile is taken over
    assert pidfile.read_text().strip() == str(__import__("os").getpid())


def test_join_token_file_is_read_and_a_missing_one_is_one_line(tmp_path: Path) -> None:
    token = tmp_path / "join-token"
    token.write_text("ab" * 32 + "\n")
    cfg = parse(json.dumps({
        "roles": ["worker"], "controller": {"addresses": ["h:1"], "ca_file": "c"}, "template": "cpu",
        "host_name": "h1", "instance_id": "i-1", "join_token_file": str(token),
    }))  # fmt: skip
    assert read_join_token(cfg.join_token_file) == "ab" * 32
    assert read_join_token("") == ""
    with pytest.raises(ConfigProblem, match="cannot read the join token"):
        read_join_token(str(tmp_path / "missing"))
