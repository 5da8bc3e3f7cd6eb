"""The simulated controller as a real process, driven through ``xceprov sim controller|submit|failover``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.protocol.tls import cert_names
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from sim_controller_helpers import connect, join_provisioner, join_worker  # noqa: E402
from sim_controller_helpers import free_port as _free_port  # noqa: E402
from sim_controller_helpers import wait_for as _wait_for  # noqa: E402


def _xceprov(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--config", str(config), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """A configuration whose simulated state lives in ``tmp_path``; the controller is stopped after."""
    port = _free_port()
    cfg = yaml.safe_load((ROOT / "orchestrator/defaults/xceprov.yaml").read_text())
    cfg["state_dir"] = str(tmp_path / "state")
    cfg["controller"]["addresses"] = [f"127.0.0.1:{port}"]
    # A second listen address that exists on every Linux machine (the whole of 127/8 is loopback);
    # it stands in for the lab gateway that simulated hosts use.
    cfg["controller"]["worker_addresses"] = [f"127.0.0.2:{port}"]
    cfg["controller"]["ca"] = str(tmp_path / "state/sim/tls/ca.pem")
    config = tmp_path / "xceprov.yaml"
    config.write_text(yaml.safe_dump(cfg))
    state = tmp_path / "state" / "sim"
    try:
        yield config, state, port
    finally:
        pid_file = state / "controller.pid"
        try:
            admin.shutdown(state, timeout=5)
        except Exception:
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
        _wait_for("the controller to exit", lambda: not pid_file.exists(), timeout=15)


def test_cli_controller_submit_failover(world: tuple[Path, Path, int]) -> None:
    config, state, port = world
    r = _xceprov(config, "sim", "controller")
    assert r.returncode == 0, r.stderr
    assert "started" in r.stdout and f"127.0.0.2:{port}" in r.stdout
    again = _xceprov(config, "sim", "controller")
    assert again.returncode == 0 and "already running" in again.stdout
    assert (state / "controller.pid").exists()
    sans = cert_names((state / "tls/server.pem").read_bytes())
    assert {"localhost", "127.0.0.1", "127.0.0.2"} <= sans
    assert (state / "controller.sock").stat().st_mode & 0o077 == 0

    ca = state / "tls" / "ca.pem"
    prov = connect(("127.0.0.1", port), ca)
    worker = connect(("127.0.0.2", port), ca, server_hostname="127.0.0.2")
    try:
        j = join_provisioner(prov, "orch-a", ["sim"])
        assert j.kind == "joined"
        term = j.body["term"]
        assert prov.wait_push("demand").body["templates"] == []

        r = _xceprov(config, "sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "2s")
        assert r.returncode == 0 and "work 1" in r.stdout, r.stderr
        rising = prov.wait_push("demand").body["templates"][0]
        assert rising["template"] == "cpu" and rising["wanted"] == 2

        assert join_worker(worker, "h1", "i-1").kind == "joined"
        d = prov.wait_push("demand").body["templates"][0]
        assert d["wanted"] == 1 and d["idle"] == 1
        # The second worker joins: the work starts, demand falls to zero; 2 s later both are idle.
        w2 = connect(("127.0.0.1", port), ca)
        try:
            assert join_worker(w2, "h2", "i-2").kind == "joined"
            while True:
                d = prov.wait_push("demand").body["templates"][0]
                if d["busy"] == 2:
                    break
            assert d["wanted"] == 0
            while True:
                d = prov.wait_push("demand").body["templates"][0]
                if d["idle"] == 2:
                    break
            assert d["busy"] == 0 and d["wanted"] == 0
        finally:
            w2.close()

        r = _xceprov(config, "sim", "failover")
        assert r.returncode == 0 and f"term is now {term + 1}" in r.stdout, r.stderr
        st = admin.status(state)
        assert st["term"] == term + 1
    finally:
        prov.close()
        worker.close()


def test_cli_without_controller_says_so(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "orchestrator/defaults/xceprov.yaml").read_text())
    cfg["state_dir"] = str(tmp_path / "state")
    config = tmp_path / "xceprov.yaml"
    config.write_text(yaml.safe_dump(cfg))
    r = _xceprov(config, "sim", "failover")
    assert r.returncode == 75
    assert "no simulated controller is running" in r.stderr


def test_real_client_link_sees_demand_and_resyncs_after_failover(world: tuple[Path, Path, int]) -> None:
    """The orchestrator's own controller link against the controller process."""
    from orchestrator.clients.controller.link import ControllerLink
    from orchestrator.model.config import ControllerSettings

    config, state, port = world
    assert _xceprov(config, "sim", "controller", "--ttl", "3s").returncode == 0
    settings = ControllerSettings(
        addresses=[f"127.0.0.1:{port}"], ca=state / "tls" / "ca.pem", connect_timeout=2.0, request_timeout=5.0
    )
    link = ControllerLink(settings, instance_id="orch-real", providers=["sim"], cluster="demo")
    link.start()
    try:
        assert link.wait_connected(20)
        term = link.state().term

        def wanted() -> int:
            snap = link.demand()
            return sum(t.wanted for t in snap.templates) if snap is not None else -1

        _wait_for("the empty demand snapshot at join", lambda: wanted() == 0)
        assert _xceprov(config, "sim", "submit", "-t", "gpu", "-n", "3", "-d", "1m").returncode == 0
        _wait_for("the demand push", lambda: wanted() == 3)
        assert _xceprov(config, "sim", "failover").returncode == 0
        _wait_for("the rejoin in the new term", lambda: link.state().term == term + 1)
        snap = link.demand()
        assert snap is not None and snap.term == term + 1 and wanted() == 3
    finally:
        link.close()
