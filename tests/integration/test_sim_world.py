"""``xceprov sim up|down|status`` and ``sim hosts ...`` against the real cloud store (root only).

The world runs on a lab of its own (a free /24 of 10.213.128.0/17) and a free controller port,
so the test can run while a product world or other tests run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from sim_labs import claim_test_lab

from orchestrator.cli.main import cli
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts import lab as labnet

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="simulated hosts need root (network namespaces, mounts)"),
]

DEFAULTS = Path(__file__).resolve().parents[2] / "orchestrator" / "defaults" / "xceprov.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class World:
    def __init__(self, tmp_path: Path, lab: labnet.LabConfig) -> None:
        self.lab = lab
        self.sim = tmp_path / "sim"
        self.port = free_port()
        config = yaml.safe_load(DEFAULTS.read_text())
        config["state_dir"] = str(tmp_path / "state")
        config["sim"] = {"state_dir": str(self.sim)}
        # Where this world's controller listens: `sim up` takes it from here.
        config["controller"]["addresses"] = [f"127.0.0.1:{self.port}"]
        config["controller"]["worker_addresses"] = [f"{lab.gateway}:{self.port}"]
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.config = tmp_path / "xceprov.yaml"
        self.config.write_text(yaml.safe_dump(config))

    def run(self, *args: str) -> str:
        result = CliRunner().invoke(cli, ["--config", str(self.config), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    def up(self) -> dict[str, Any]:
        out = self.run("sim", "up", "--json", "--lab-name", self.lab.name, "--lab-subnet", str(self.lab.subnet))
        return dict(json.loads(out))

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.run("sim", "status", "--json")))

    def component(self, status: dict[str, Any], name: str) -> dict[str, Any]:
        return dict(next(c for c in status["components"] if c["name"] == name))

    def store(self) -> CloudStore:
        # `sim up` bound the world's cloud to its lab: addresses come from the lab's subnet.
        return CloudStore(self.sim / "cloud.sqlite")


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    lab = claim_test_lab(f"{os.getpid()}/{request.node.nodeid}")
    w = World(tmp_path, lab)
    try:
        yield w
    finally:
        CliRunner().invoke(cli, ["--config", str(w.config), "sim", "down"])
        labnet.destroy_lab(lab)


def wait_hosts(world: World, want: dict[str, str], timeout: float = 30.0) -> list[dict[str, Any]]:
    """Poll ``sim hosts list --json`` until the hosts named in ``want`` have those states."""
    deadline = time.monotonic() + timeout
    hosts: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        hosts = json.loads(world.run("sim", "hosts", "list", "--json"))
        states = {h.get("name"): h["state"] for h in hosts}
        if states == want:
            return hosts
        time.sleep(0.1)
    pytest.fail(f"hosts {hosts} never reached {want}")


def leftovers(world: World) -> list[str]:
    found = [f"netns {n}" for n in labnet.netns_list() if world.lab.name in n]
    if labnet.link_exists(world.lab.gateway_if):
        found.append(f"link {world.lab.gateway_if}")
    found += [f"mount {line}" for line in Path("/proc/mounts").read_text().splitlines() if str(world.sim) in line]
    procs = subprocess.run(["pgrep", "-af", str(world.sim)], capture_output=True, text=True, check=False)
    found += [f"process {line}" for line in procs.stdout.splitlines()]
    return found


def test_up_is_idempotent_hosts_follow_the_store_and_down_leaves_nothing(world: World) -> None:
    first = world.up()
    hm = world.component(first, "host-manager")
    assert hm["state"] == "running"
    assert first["lab"]["up"] is True
    second = world.up()
    assert world.component(second, "host-manager")["pid"] == hm["pid"]
    # A second host manager for the same state directory refuses to start.
    extra = subprocess.run(
        [sys.executable, "-m", "orchestrator.sim.hosts", "serve", "--state-dir", str(world.sim),
         "--lab-name", world.lab.name, "--lab-subnet", str(world.lab.subnet)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert extra.returncode == 75 and "already runs" in extra.stderr

    store = world.store()
    name = f"t{os.getpid()}-w-1"
    inst = store.create_instance(name, "c8.large", "debian-12", {}, "", "tok-1")
    assert world.lab.holds(inst.address)
    hosts = wait_hosts(world, {name: "ready"})
    assert hosts[0]["address"] == inst.address

    ssh_config = world.sim / "ssh_config"
    ssh_config.write_text(world.run("sim", "hosts", "ssh-config"))
    out = subprocess.run(
        ["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", name, "hostname"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == name

    ctl = world.component(world.status(), "controller")
    if ctl["state"] != "unavailable":
        # The controller listens on the lab gateway too, and a host reaches it there.
        gateway = f"{world.lab.gateway}:{world.port}"
        assert ctl["state"] == "running" and gateway in ctl["addresses"]
        probe = subprocess.run(
            ["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", name,
             f"nc -z -w 5 {world.lab.gateway} {world.port} && echo reached"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert probe.stdout.strip() == "reached", probe.stderr

    text = world.run("sim", "status")
    assert "host-manager" in text and name in text and "ready" in text

    # A crashed host manager: `up` starts a new one, which sweeps and rebuilds the host.
    os.kill(hm["pid"], signal.SIGKILL)
    third = world.up()
    assert world.component(third, "host-manager")["pid"] != hm["pid"]
    wait_hosts(world, {name: "ready"})

    store.delete(inst.id)
    wait_hosts(world, {})

    store.create_instance(name + "x", "c8.large", "debian-12", {}, "", "tok-2")
    wait_hosts(world, {name + "x": "ready"})
    down = json.loads(world.run("sim", "down", "--json"))
    assert world.component(down, "host-manager")["state"] == "stopped"
    assert down["lab"]["up"] is False
    assert leftovers(world) == []
    assert not (world.sim / "run" / "host-manager.pid").exists()
    # Idempotent: a second down is fine too.
    world.run("sim", "down")


def test_down_after_a_crash_leaves_nothing(world: World) -> None:
    hm = world.component(world.up(), "host-manager")
    store = world.store()
    name = f"t{os.getpid()}-c-1"
    store.create_instance(name, "c8.large", "debian-12", {}, "", "tok-c")
    wait_hosts(world, {name: "ready"})
    os.kill(hm["pid"], signal.SIGKILL)  # no teardown by the manager itself
    world.run("sim", "down")
    assert leftovers(world) == []


def test_two_worlds_side_by_side_each_with_its_lab_cloud_and_controller(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two worlds on one machine, set up only through `sim up` options and the configuration:
    each cloud hands out addresses in its own lab, each controller listens where its
    configuration says, and neither world sees the other's hosts."""
    labs: list[labnet.LabConfig] = []
    worlds: list[World] = []
    try:
        for n in ("a", "b"):
            labs.append(claim_test_lab(f"{os.getpid()}/{request.node.nodeid}/{n}"))
            worlds.append(World(tmp_path / n, labs[-1]))
        for w in worlds:
            w.up()
        names = {}
        for n, w in zip(("a", "b"), worlds, strict=True):
            names[n] = f"t{os.getpid()}-{n}"
            inst = w.store().create_instance(names[n], "c8.large", "debian-12", {}, "", f"tok-{n}")
            assert w.lab.holds(inst.address), (inst.address, str(w.lab.subnet))
            ctl = w.component(w.status(), "controller")
            if ctl["state"] != "unavailable":
                assert ctl["addresses"] == [f"127.0.0.1:{w.port}", f"{w.lab.gateway}:{w.port}"]
                with socket.create_connection(("127.0.0.1", w.port), timeout=5):
                    pass
        for n, w in zip(("a", "b"), worlds, strict=True):
            [host] = wait_hosts(w, {names[n]: "ready"})
            assert w.lab.holds(host["address"])
        for w in worlds:
            w.run("sim", "down")
            assert leftovers(w) == []
    finally:
        for w in worlds:
            CliRunner().invoke(cli, ["--config", str(w.config), "sim", "down"])
        for lab in labs:
            labnet.destroy_lab(lab)
