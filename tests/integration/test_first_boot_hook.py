"""A baked image joins by itself at boot: the role's bake mode, an image of the builder, the boot hook.

One module-scoped world (root only): a lab of simulated hosts fed by the simulated cloud's store,
a simulated controller on the lab's gateway, a builder host on which the ``xce_node_manager``
role runs in bake mode over SSH, and an image of it (the store's ``create_image``, what
``xcesim_image`` does). Hosts started from that image get their configuration, CA and join token
in user data only (written directly here; the orchestrator's token path is its own test's): none
is reached over SSH while it joins, and what the boot did is read on its console.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_controller_helpers import Running, running_controller, worker_token
from sim_labs import claim_test_lab
from sim_world_helpers import process_tree

from orchestrator.sim.cloud import images
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts import lab as labnet
from orchestrator.sim.hosts.console import console_output
from orchestrator.sim.hosts.keys import known_hosts_path, toolkit_key
from orchestrator.sim.hosts.manager import CloudStoreSource, HostManager

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "XCE-FIRST-BOOT "
HOOK = "var/lib/cloud/scripts/per-boot/50-xce-node-manager"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="simulated hosts need root (network namespaces, mounts)"),
]


@dataclass
class BakedWorld:
    """The world of this module: cloud store, hosts, controller, and the baked image."""

    tmp: Path
    store: CloudStore
    manager: HostManager
    controller: Running
    image_id: str
    builder_id: str

    @property
    def sim(self) -> Path:
        return self.manager.state_dir

    def controller_address(self) -> str:
        host, port = self.controller.addr
        return f"{host}:{port}"

    def wait_booted(self, instance_id: str, timeout: float = 90.0) -> None:
        """Until the host wrote boot-finished (after its per-boot scripts)."""
        done = self.sim / "hosts" / instance_id / "upper/var/lib/cloud/instances" / instance_id / "boot-finished"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.manager.reconcile_once()
            if instance_id in self.manager.failed:
                pytest.fail(f"host boot failed: {self.manager.failed[instance_id]}")
            if done.exists():
                return
            time.sleep(0.1)
        pytest.fail(f"{instance_id} did not finish booting; console: {self.console(instance_id)!r}")

    def console(self, instance_id: str) -> str:
        out = console_output(self.sim, instance_id)
        return out.text if out else ""

    def first_boot_lines(self, instance_id: str) -> list[dict[str, Any]]:
        return [
            json.loads(line[len(PREFIX) :])
            for line in self.console(instance_id).splitlines()
            if line.startswith(PREFIX)
        ]

    def processes(self, instance_id: str, needle: bytes) -> list[int]:
        """The processes of that host whose command line holds ``needle`` (its boot process's
        tree: orphans of the host are reparented to its PID 1, sshd)."""
        proc = self.manager.hosts[instance_id].proc
        assert proc is not None
        found = []
        for pid in process_tree(proc.pid):
            try:
                if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    def node_managers(self, instance_id: str) -> list[int]:
        """The node manager processes running in that host."""
        return self.processes(instance_id, b"xce-node-manager")

    def joined(self, host_name: str) -> bool:
        return any(h.host_name == host_name and h.session is not None for h in self.controller.core.hosts.values())


def _ssh_args(sim: Path) -> str:
    return f"-o UserKnownHostsFile={known_hosts_path(sim)} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"


# What a builder host may hold of a node manager of its own (a host that was pushed before it is
# baked): configuration, CA, token, state, logs, and a "node manager" running under the pidfile.
LEFTOVERS = (
    "mkdir -p /etc/xce /var/lib/xce /var/log/xce"
    ' && echo \'{"host_name": "builder"}\' > /etc/xce/node-manager.json'
    " && echo CA > /etc/xce/ca.pem && echo v2.1.secret > /etc/xce/join-token"
    " && echo '{}' > /var/lib/xce/join-result.json && echo log > /var/log/xce/node-manager.log"
    " && (setsid sleep 1234 </dev/null >/dev/null 2>&1 & echo $! > /run/xce-node-manager.pid)"
)


def _ssh(sim: Path, address: str, command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", "/dev/null", "-i", str(toolkit_key(sim)), "-o", "BatchMode=yes", *_ssh_args(sim).split()]
    return subprocess.run([*argv, f"root@{address}", command], capture_output=True, text=True, timeout=60, check=False)


def _bake(world_tmp: Path, sim: Path, address: str, artifact: Path) -> subprocess.CompletedProcess[str]:
    """The bootstrap in bake mode on the builder (no controller, no host values)."""
    inventory = {
        "all": {
            "hosts": {
                "builder": {
                    "ansible_host": address,
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(toolkit_key(sim)),
                    "ansible_ssh_common_args": _ssh_args(sim),
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "xce_node_manager_bake": True,
                    "xce_node_manager_install_method": "artifact",
                    "xce_node_manager_archive_src": str(artifact),
                    "xce_node_manager_interpreter": "/usr/bin/python3",
                    "xce_node_manager_first_boot_timeout": 30,
                }
            }
        }
    }
    (world_tmp / "inventory.json").write_text(json.dumps(inventory))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "ansible" / "roles"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_LOCAL_TEMP": str(world_tmp / "ansible-local"),
    }
    playbook = Path(sys.executable).with_name("ansible-playbook")
    # The bootstrap playbook itself (validate, wait, hooks, role, check), as a bake runs it.
    argv = [str(playbook), "-i", str(world_tmp / "inventory.json"), str(ROOT / "ansible/playbooks/bootstrap.yml")]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BakedWorld]:
    from orchestrator.sim.nodemanager import build_artifact

    tmp = tmp_path_factory.mktemp("baked")
    artifact = build_artifact(tmp / "dist")
    lab = claim_test_lab(f"{os.getpid()}/test_first_boot_hook")
    store = CloudStore(tmp / "sim" / "cloud.sqlite")
    try:
        store.set_network(lab.subnet)
        manager = HostManager(tmp / "sim", lab, CloudStoreSource(store.path))
        manager.start()
        try:
            with running_controller(tmp / "ctl", listen=str(lab.gateway)) as controller:
                builder = store.create_instance(f"t{os.getpid()}-builder", "c8.large", "debian-12", {}, "", "bake-0")
                partial = BakedWorld(tmp, store, manager, controller, "", builder.id)
                partial.wait_booted(builder.id)
                seeded = _ssh(manager.state_dir, builder.address, LEFTOVERS)
                assert seeded.returncode == 0, seeded.stderr
                assert partial.processes(builder.id, b"sleep\x001234")
                baked = _bake(tmp, manager.state_dir, builder.address, artifact)
                assert baked.returncode == 0, baked.stdout[-4000:] + baked.stderr[-2000:]
                image = store.create_image(builder.id, "cpu", {"xce:cluster": "itest"})
                yield BakedWorld(tmp, store, manager, controller, image.id, builder.id)
        finally:
            manager.shutdown(remove_lab=True)
    finally:
        store.close()
        labnet.destroy_lab(lab)


def _user_data(world: BakedWorld, host_name: str, instance_key: str, token: str) -> str:
    """The first-boot user data: configuration, CA and token as data (write_files)."""
    config = {
        "roles": ["worker"],
        "controller": {"addresses": [world.controller_address()], "ca_file": "/etc/xce/ca.pem"},
        "template": "cpu",
        "host_name": host_name,
        "instance_key": instance_key,
        "op_id": instance_key.rsplit("-", 1)[0],
        "join_token_file": "/etc/xce/join-token",
    }
    files = [
        {"path": "/etc/xce/node-manager.json", "content": json.dumps(config), "permissions": "0640"},
        {"path": "/etc/xce/ca.pem", "content": world.controller.ca.read_text(), "permissions": "0644"},
        {"path": "/etc/xce/join-token", "content": token + "\n", "permissions": "0600"},
    ]
    return "#cloud-config\n" + yaml.safe_dump({"write_files": files})


def _launch(world: BakedWorld, n: int, user_data: str, key: str) -> tuple[str, str]:
    name = f"t{os.getpid()}-fb-{n}"
    inst = world.store.create_instance(name, "c8.large", world.image_id, {}, user_data, key)
    return inst.id, name


def test_the_bake_leaves_the_node_manager_and_hook_and_nothing_of_the_builder(world: BakedWorld) -> None:
    files = images.image_dir(world.sim, world.image_id)
    hook = files / HOOK
    assert hook.is_file() and hook.stat().st_mode & 0o111
    assert (files / "opt/xce/bin/xce-node-manager").is_file()
    assert (files / "opt/xce/sbin/xce-node-manager-service").stat().st_mode & 0o111
    for absent in ("etc/xce/node-manager.json", "etc/xce/ca.pem", "etc/xce/join-token"):
        assert not (files / absent).exists(), absent
    text = hook.read_text()
    assert world.controller_address() not in text and "t" + str(os.getpid()) + "-builder" not in text
    # The builder's own node manager was stopped and its traces removed; nothing was started.
    disk = images.disk_dir(world.sim, world.builder_id) / "upper"
    for gone in ("etc/xce/node-manager.json", "etc/xce/ca.pem", "etc/xce/join-token", "var/lib/xce", "var/log/xce"):
        assert not (disk / gone).exists(), gone
    assert world.processes(world.builder_id, b"sleep\x001234") == []
    assert world.node_managers(world.builder_id) == []


def test_a_host_from_the_image_joins_at_boot_and_says_so_on_its_console(world: BakedWorld) -> None:
    key = "op-00000001-fb0001-000"
    name = f"t{os.getpid()}-fb-1"
    token = worker_token(world.controller.state_dir, key, name)
    instance_id, _ = _launch(world, 1, _user_data(world, name, key, token), key)
    world.wait_booted(instance_id)
    assert world.joined(name), [h.host_name for h in world.controller.core.hosts.values()]
    lines = world.first_boot_lines(instance_id)
    assert [(line["v"], line["outcome"], line["step"]) for line in lines] == [(1, "started", "join")]
    assert name in lines[0]["message"]
    assert token not in world.console(instance_id)
    assert world.node_managers(instance_id)  # what the case without configuration must not have


def test_a_bad_token_fails_the_join_with_the_controllers_reason(world: BakedWorld) -> None:
    key = "op-00000001-fb0002-000"
    name = f"t{os.getpid()}-fb-2"
    wrong = worker_token(world.controller.state_dir, key, "another-host")
    instance_id, _ = _launch(world, 2, _user_data(world, name, key, wrong), key)
    world.wait_booted(instance_id)
    lines = world.first_boot_lines(instance_id)
    assert [(line["outcome"], line["step"]) for line in lines] == [("failed", "join")]
    assert lines[0]["message"].startswith("tokenInvalid: ")
    assert not world.joined(name)
    # cloud-init records the failed hook and the boot goes on (boot-finished was written).
    result = world.sim / "hosts" / instance_id / "upper/var/lib/cloud/data/result.json"
    assert json.loads(result.read_text())["v1"]["errors"] == [
        "Runparts: 1 failures (50-xce-node-manager) in 1 attempted commands"
    ]
    assert wrong not in world.console(instance_id)


def test_a_host_from_the_image_without_configuration_starts_nothing_and_prints_nothing(world: BakedWorld) -> None:
    instance_id, _ = _launch(world, 3, "", "op-00000001-fb0003-000")
    world.wait_booted(instance_id)
    assert world.first_boot_lines(instance_id) == []
    upper = world.sim / "hosts" / instance_id / "upper"
    assert not (upper / "var/lib/xce").exists() and not (upper / "var/log/xce").exists()
    assert world.node_managers(instance_id) == []
