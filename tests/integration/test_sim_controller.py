"""The simulated controller as a real process: started by ``xceprov sim up --only controller``
(the one way to start it), seen by ``sim status``, driven by ``sim submit|failover``, stopped by
``sim down``; the orchestrator's own link authenticates with the certificate ``sim up`` issued."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.protocol.jointoken import join_token, read_join_key
from orchestrator.sim.controller import admin
from orchestrator.sim.hosts.host import port_open
from orchestrator.sim.pki import cert_names

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from sim_controller_helpers import commit, connect, join_provisioner, join_worker, lease  # noqa: E402
from sim_controller_helpers import free_port as _free_port  # noqa: E402
from sim_controller_helpers import wait_for as _wait_for  # noqa: E402


def _xceprov(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--config", str(config), *args],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip


def _component(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in status["components"] if c["name"] == name)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """The built-in configuration with its state in ``tmp_path`` and a free port; ``sim down`` after."""
    port = _free_port()
    cfg = yaml.safe_load((ROOT / "orchestrator/defaults/xceprov.yaml").read_text())
    cfg["state_dir"] = str(tmp_path / "state")
    sim = tmp_path / "state" / "sim"
    cfg["controller"]["addresses"] = [f"127.0.0.1:{port}"]
    for key, rel in (
        ("ca", "tls/ca.pem"),
        ("client_cert", "client/provisioner.pem"),
        ("client_key", "client/provisioner.key"),
        ("join_key", "client/join.key"),
    ):
        cfg["controller"][key] = str(sim / rel)  # what the built-in configuration names, under tmp_path
    config = tmp_path / "xceprov.yaml"
    config.write_text(yaml.safe_dump(cfg))
    try:
        yield config, sim, port
    finally:
        _xceprov(config, "sim", "down")


def test_one_way_to_start_seen_by_status_and_gone_after_down(world: tuple[Path, Path, int]) -> None:
    config, sim, port = world
    r = _xceprov(config, "sim", "up", "--only", "controller", "--controller-port", str(port), "--json")
    assert r.returncode == 0, r.stderr
    up = json.loads(r.stdout)
    ctl = _component(up, "controller")
    assert ctl["state"] == "running" and f"127.0.0.1:{port}" in ctl["addresses"]
    assert _component(up, "host-manager")["state"] != "running"  # --only: the controller alone
    again = json.loads(_xceprov(config, "sim", "up", "--only", "controller", "--json").stdout)
    assert _component(again, "controller")["pid"] == ctl["pid"]  # idempotent
    st = json.loads(_xceprov(config, "sim", "status", "--json").stdout)
    assert _component(st, "controller")["pid"] == ctl["pid"]
    assert {"localhost", "127.0.0.1"} <= cert_names((sim / "tls/server.pem").read_bytes())
    files = st["controller_tls"]
    for key in ("client_key", "join_key"):
        path = Path(files[key])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((sim / "tls/ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((sim / "controller.sock").stat().st_mode) & 0o077 == 0

    down = json.loads(_xceprov(config, "sim", "down", "--json").stdout)
    assert _component(down, "controller")["state"] == "stopped"
    assert not port_open("127.0.0.1", port, timeout=0.3)
    assert not Path(f"/proc/{ctl['pid']}").exists() or "orchestrator.sim.controller" not in Path(
        f"/proc/{ctl['pid']}/cmdline"
    ).read_text(errors="replace")
    # A later up finds the port free (the old second start path left a controller sim up missed).
    assert _xceprov(config, "sim", "up", "--only", "controller", "--controller-port", str(port)).returncode == 0


def test_issued_credentials_drive_demand_and_only_they_do(world: tuple[Path, Path, int]) -> None:
    config, sim, port = world
    r = _xceprov(config, "sim", "up", "--only", "controller", "--controller-port", str(port), "--json")
    assert r.returncode == 0, r.stderr
    files = json.loads(r.stdout)["controller_tls"]
    ca, cert = Path(files["ca"]), (Path(files["client_cert"]), Path(files["client_key"]))
    key = read_join_key(Path(files["join_key"]))
    prov = connect(("127.0.0.1", port), ca, cert=cert)
    anonymous = connect(("127.0.0.1", port), ca)
    workers = [connect(("127.0.0.1", port), ca) for _ in range(2)]
    try:
        assert join_provisioner(anonymous, "sim-orchestrator", ["sim"]).body["code"] == "permissionDenied"
        j = join_provisioner(prov, "anything", ["sim"])
        assert j.kind == "joined"
        assert lease(prov, "leaseAcquire", "sim").body["holder"] == "sim-orchestrator"
        assert prov.wait_push("demand").body["templates"] == []
        r2 = _xceprov(config, "sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "2s")
        assert r2.returncode == 0 and "work 1" in r2.stdout, r2.stderr
        assert prov.wait_push("demand").body["templates"][0]["wanted"] == 2
        for i, w in enumerate(workers):
            name = f"h{i}"
            assert join_worker(w, name, f"i-{i}", token=join_token(key, "", name, 2**33)).kind == "joined"
        while True:
            d = prov.wait_push("demand").body["templates"][0]
            if d["busy"] == 2:
                break
        assert d["wanted"] == 0
        term = j.body["term"]
        r3 = _xceprov(config, "sim", "failover")
        assert r3.returncode == 0 and f"term is now {term + 1}" in r3.stdout, r3.stderr
        assert admin.status(sim)["term"] == term + 1
    finally:
        for c in (prov, anonymous, *workers):
            c.close()


def test_real_client_link_with_the_issued_certificate(world: tuple[Path, Path, int]) -> None:
    """The orchestrator's own controller link, configured as the built-in configuration is."""
    from orchestrator.clients.controller.link import ControllerLink
    from orchestrator.configfile import load_config

    config, _, port = world
    assert _xceprov(config, "sim", "up", "--only", "controller", "--controller-port", str(port)).returncode == 0
    settings = load_config(str(config)).config.controller
    assert settings.ca is not None and settings.client_cert is not None and settings.join_key is not None
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


def _hosts(prov: Any) -> list[dict[str, Any]]:
    return list(prov.request(lambda env: setattr(env.init("hostStatus"), "provider", "sim")).body["hosts"])


def test_a_restarted_controller_knows_who_joined_and_when_its_term_started(world: tuple[Path, Path, int]) -> None:
    """A process restart (sim down, sim up): the joined host is not never-joined, its worker's rejoin
    matches the durable record, and ``xceprov status`` shows the new term and when it started."""
    config, _, port = world

    def up() -> dict[str, str]:
        r = _xceprov(config, "sim", "up", "--only", "controller", "--controller-port", str(port), "--json")
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout)["controller_tls"])

    def status() -> dict[str, Any]:
        r = _xceprov(config, "status", "--json")
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))

    files = up()
    ca, cert = Path(files["ca"]), (Path(files["client_cert"]), Path(files["client_key"]))
    token = join_token(read_join_key(Path(files["join_key"])), "op-1-000", "op-1-000", 2**33)
    before = status()
    prov = connect(("127.0.0.1", port), ca, cert=cert)
    w = connect(("127.0.0.1", port), ca)
    try:
        join_provisioner(prov, "orch", ["sim"])
        g = lease(prov, "leaseAcquire", "sim").body["epoch"]
        r = commit(
            prov, "sim", (g["term"], g["seq"]), kind="expectedHost", opId="op-1", instanceKey="op-1-000",
            instanceId="i-1", hostName="op-1-000", template="cpu", joinDeadlineUnixMs=2**40,
        )  # fmt: skip
        assert r.kind == "ack"
        assert join_worker(w, "op-1-000", "i-1", token=token, instance_key="op-1-000").kind == "joined"
        [joined] = _hosts(prov)
        assert joined["state"] == "idle" and joined["joinedUnixMs"] > 0
    finally:
        prov.close()
        w.close()

    assert _xceprov(config, "sim", "down").returncode == 0
    up()
    # Ask at once: a joined host whose worker does not rejoin within the loss timeout (three
    # heartbeats) is lost, and the status commands below take seconds on a loaded machine.
    prov = connect(("127.0.0.1", port), ca, cert=cert)
    w = connect(("127.0.0.1", port), ca)
    try:
        join_provisioner(prov, "orch", ["sim"])
        [known] = _hosts(prov)
        assert (known["state"], known["joinedUnixMs"]) == ("disconnected", joined["joinedUnixMs"])
        assert join_worker(w, "op-1-000", "i-1", token=token, instance_key="op-1-000").body["hostState"] == "idle"
        [back] = _hosts(prov)
        assert (back["instanceKey"], back["state"]) == ("op-1-000", "idle")
        assert back["joinedUnixMs"] == joined["joinedUnixMs"]
    finally:
        prov.close()
        w.close()
    after = status()
    assert after["term"] == before["term"] + 1 and after["term_started"] > before["term_started"] > 0
    text = _xceprov(config, "status").stdout
    assert f"term {after['term']} since " in text


def test_cli_without_controller_says_so(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "orchestrator/defaults/xceprov.yaml").read_text())
    cfg["state_dir"] = str(tmp_path / "state")
    config = tmp_path / "xceprov.yaml"
    config.write_text(yaml.safe_dump(cfg))
    r = _xceprov(config, "sim", "failover")
    assert r.returncode == 75
    assert "no simulated controller is running" in r.stderr
