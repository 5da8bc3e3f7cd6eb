"""Simulated hosts over real SSH: namespaces, overlays, sshd, write_files, teardown (root only).

Each test claims its own lab (a free /24 of 10.213.128.0/17 with its own namespace and gateway
names), so it never touches another test's or the product world's addresses; everything is
torn down in fixtures, even on failure.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_labs import claim_test_lab

from orchestrator.clients.ansible.hostkeys import keyscan
from orchestrator.model.published_keys import published_keys
from orchestrator.sim.cloud.bootcopy import with_join_token
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts import lab as labnet
from orchestrator.sim.hosts.console import console_output
from orchestrator.sim.hosts.keys import control_dir, known_hosts_path, toolkit_key
from orchestrator.sim.hosts.manager import SSH_DELAY_TAG, CloudStoreSource, HostManager, InstanceView

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="simulated hosts need root (network namespaces, mounts)"),
]


class FakeSource:
    """An in-memory cloud: the test decides which instances run."""

    def __init__(self) -> None:
        self.items: list[InstanceView] = []

    def instances(self) -> list[InstanceView] | None:
        return list(self.items)


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> Iterator[labnet.LabConfig]:
    claimed = claim_test_lab(f"{os.getpid()}/{request.node.nodeid}")
    try:
        yield claimed
    finally:
        labnet.destroy_lab(claimed)


@pytest.fixture
def world(tmp_path: Path, lab: labnet.LabConfig) -> Iterator[tuple[HostManager, FakeSource]]:
    source = FakeSource()
    manager = HostManager(tmp_path / "sim", lab, source)
    manager.start()
    try:
        yield manager, source
    finally:
        manager.shutdown(remove_lab=True)


def addr(lab: labnet.LabConfig, n: int) -> str:
    return str(lab.subnet.network_address + n)


def name(n: int) -> str:
    return f"t{os.getpid()}-node-{n}"


def wait_ready(manager: HostManager, ids: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        manager.reconcile_once()
        states = {i: manager.hosts[i].poll() if i in manager.hosts else "absent" for i in ids}
        if all(s == "ready" for s in states.values()):
            return
        if any(i in manager.failed for i in ids):
            pytest.fail(f"host boot failed: {manager.failed}")
        time.sleep(0.05)
    pytest.fail(f"hosts not ready: {states}")


def ssh(manager: HostManager, address: str, command: str) -> subprocess.CompletedProcess[str]:
    """The real OpenSSH client, strict host key checking against the recorded known_hosts."""
    control_dir(manager.state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    return subprocess.run(
        [
            "ssh", "-F", "/dev/null", "-i", str(toolkit_key(manager.state_dir)),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known_hosts_path(manager.state_dir)}", "-o", "ConnectTimeout=5",
            # Connection sharing as the generated ssh_config does; teardown must close the masters.
            "-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir(manager.state_dir)}/cm-%r@%h:%p",
            "-o", "ControlPersist=60",
            f"root@{address}", command,
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_ssh_reaches_host_with_its_own_hostname_etc_and_processes(
    world: tuple[HostManager, FakeSource],
) -> None:
    manager, source = world
    lab = manager.lab
    source.items = [
        InstanceView("i-a", name(1), addr(lab, 10), "running"),
        InstanceView("i-b", name(2), addr(lab, 11), "running"),
    ]
    wait_ready(manager, ["i-a", "i-b"])

    assert ok(ssh(manager, addr(lab, 10), "hostname")).strip() == name(1)
    assert ok(ssh(manager, addr(lab, 11), "hostname")).strip() == name(2)

    marker = f"/etc/xce/t{os.getpid()}-private"
    ok(ssh(manager, addr(lab, 10), f"mkdir -p /etc/xce /opt/xce && echo a > {marker} && touch /opt/xce/a"))
    assert ok(ssh(manager, addr(lab, 10), f"cat {marker}")).strip() == "a"
    assert ssh(manager, addr(lab, 11), f"test -e {marker} || test -e /opt/xce/a").returncode == 1
    assert not Path(marker).exists()
    assert not Path("/opt/xce/a").exists()
    # Packages land in the host's own /usr; the rest of the real root is read-only in a host.
    probe = f"/usr/local/bin/t{os.getpid()}-probe"
    ok(ssh(manager, addr(lab, 10), f"touch {probe}"))
    assert not Path(probe).exists()
    refused = ssh(manager, addr(lab, 10), f"touch /t{os.getpid()}-probe")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    # The write went to host a's own upper layer.
    assert (manager.hosts_dir / "i-a" / "upper" / marker.lstrip("/")).read_text() == "a\n"

    # Only this host's processes: its sshd (PID 1), the session, and the ps itself.
    lines = ok(ssh(manager, addr(lab, 10), "ps -e -o pid=,comm=")).split("\n")
    procs = [line.split(None, 1) for line in lines if line.strip()]
    assert ["1", "sshd"] in procs
    assert {comm for _, comm in procs} <= {"sshd", "bash", "sh", "ps"}
    assert all(int(pid) < 1000 for pid, _ in procs)


def test_host_reaches_a_server_on_the_gateway_and_nothing_else(world: tuple[HostManager, FakeSource]) -> None:
    manager, source = world
    lab = manager.lab
    source.items = [InstanceView("i-a", name(1), addr(lab, 20), "running")]
    wait_ready(manager, ["i-a"])

    server = socket.create_server((str(lab.gateway), 0))
    port = server.getsockname()[1]
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            received.append(conn.recv(100))
            conn.sendall(b"pong\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        out = ok(ssh(manager, addr(lab, 20), f"echo ping | nc -N -w 5 {lab.gateway} {port}"))
    finally:
        thread.join(timeout=10)
        server.close()
    assert out.strip() == "pong"
    assert received == [b"ping\n"]

    routes = ok(ssh(manager, addr(lab, 20), "ip -4 route show; ip -6 addr show"))
    assert "default" not in routes
    assert routes.splitlines()[0].startswith(str(lab.subnet))
    assert "inet6" not in routes


def test_write_files_from_user_data_and_boot_finished(world: tuple[HostManager, FakeSource]) -> None:
    manager, source = world
    lab = manager.lab
    user_data = (
        "#cloud-config\n"
        "write_files:\n"
        "  - path: /etc/xce/node.yaml\n"
        "    content: |\n"
        "      roles: [worker]\n"
        "    permissions: '0640'\n"
        "    owner: root:daemon\n"
        f"  - path: /opt/xce/blob\n"
        f"    encoding: b64\n"
        f"    content: {base64.b64encode(b'binary').decode()}\n"
        "packages: [ignored]\n"
    )
    source.items = [InstanceView("i-w", name(1), addr(lab, 30), "running", user_data)]
    wait_ready(manager, ["i-w"])
    out = ok(
        ssh(
            manager,
            addr(lab, 30),
            "stat -c '%a %U %G' /etc/xce/node.yaml; cat /etc/xce/node.yaml /opt/xce/blob; echo;"
            " test -f /var/lib/cloud/instance/boot-finished && echo finished",
        )
    ).splitlines()
    assert out == ["640 root daemon", "roles: [worker]", "binary", "finished"]


def test_terminate_leaves_no_namespace_mount_or_process(world: tuple[HostManager, FakeSource]) -> None:
    manager, source = world
    lab = manager.lab
    source.items = [InstanceView("i-t", name(1), addr(lab, 40), "running")]
    wait_ready(manager, ["i-t"])
    host = manager.hosts["i-t"]
    assert host.proc is not None
    boot_pid, netns, veth, host_dir = host.proc.pid, host.netns, host.veth, host.dir
    # A process the host starts in the background must go too.
    ok(ssh(manager, addr(lab, 40), "nohup sleep 1000 >/dev/null 2>&1 &"))

    source.items = []
    manager.reconcile_once()

    assert "i-t" not in manager.hosts
    assert netns not in labnet.netns_list()
    assert not labnet.link_exists(veth, lab.netns)
    assert not Path(f"/proc/{boot_pid}").exists()
    assert not host_dir.exists()  # terminated: its disk is gone
    mounts = Path("/proc/mounts").read_text()
    assert str(manager.state_dir) not in mounts and netns not in mounts
    leftovers = subprocess.run(["pgrep", "-f", str(host_dir)], capture_output=True, text=True, check=False)
    assert leftovers.stdout == ""
    masters = subprocess.run(["pgrep", "-f", f"cm-root@{addr(lab, 40)}:"], capture_output=True, text=True, check=False)
    assert masters.stdout == ""  # the ssh control master of the host was closed
    assert addr(lab, 40) not in known_hosts_path(manager.state_dir).read_text()


def test_stopped_host_keeps_its_disk_and_host_key(world: tuple[HostManager, FakeSource]) -> None:
    manager, source = world
    lab = manager.lab
    inst = InstanceView("i-s", name(1), addr(lab, 50), "running")
    source.items = [inst]
    wait_ready(manager, ["i-s"])
    ok(ssh(manager, addr(lab, 50), "mkdir -p /opt/xce && echo kept > /opt/xce/state"))
    source.items = [InstanceView("i-s", name(1), addr(lab, 50), "stopped")]
    manager.reconcile_once()
    assert "i-s" not in manager.hosts
    source.items = [inst]
    wait_ready(manager, ["i-s"])
    # Strict host key checking passes again: the host key survived the stop.
    assert ok(ssh(manager, addr(lab, 50), "cat /opt/xce/state")).strip() == "kept"


def test_stop_start_and_an_image_through_the_cloud_store_keep_and_carry_the_xce_files(
    tmp_path: Path, lab: labnet.LabConfig
) -> None:
    store = CloudStore(tmp_path / "sim" / "cloud.sqlite")
    store.set_network(lab.subnet)
    manager = HostManager(tmp_path / "sim", lab, CloudStoreSource(store.path))
    manager.start()
    try:
        builder = store.create_instance(name(1), "c8.large", "debian-12", {}, "", "bake")
        wait_ready(manager, [builder.id])
        write = "mkdir -p /etc/xce /opt/xce/bin && echo baked > /etc/xce/node.conf && echo v1 > /opt/xce/bin/VERSION"
        ok(ssh(manager, builder.address, write + " && echo mine > /etc/motd.local"))
        store.stop(builder.id)
        manager.reconcile_once()
        assert builder.id not in manager.hosts and ssh(manager, builder.address, "true").returncode == 255
        image = store.create_image(builder.id, "cpu", {"xce:cluster": "itest"})
        store.start(builder.id)
        worker = store.create_instance(name(2), "c8.large", image.id, {}, "", "op-1-0")
        wait_ready(manager, [builder.id, worker.id])
        # The builder is back at its address with its files; the worker started with the image's.
        assert ok(ssh(manager, builder.address, "cat /etc/xce/node.conf /etc/motd.local")) == "baked\nmine\n"
        assert ok(ssh(manager, worker.address, "cat /etc/xce/node.conf /opt/xce/bin/VERSION")) == "baked\nv1\n"
        assert ok(ssh(manager, worker.address, "hostname")).strip() == name(2)
        assert ssh(manager, worker.address, "test -e /etc/motd.local").returncode == 1  # not in an image
    finally:
        manager.shutdown(remove_lab=True)
        store.close()


def test_a_first_boot_host_boots_with_the_clouds_copy_holding_its_token(tmp_path: Path, lab: labnet.LabConfig) -> None:
    """The host manager boots an instance with the cloud's boot copy of its user data: a
    first-boot host's /etc/xce/join-token (0600) is on the host; the API's user_data has no token."""
    token = "v2.1800000000." + "c4" * 32
    user_data = "#cloud-config\nwrite_files:\n  - path: /etc/xce/node-manager.json\n    content: '{}'\n"
    store = CloudStore(tmp_path / "sim" / "cloud.sqlite")
    store.set_network(lab.subnet)
    manager = HostManager(tmp_path / "sim", lab, CloudStoreSource(store.path))
    manager.start()
    try:
        boot = with_join_token(user_data, token)
        inst = store.create_instance(name(1), "c8.large", "debian-12", {}, user_data, "op-1-000", boot_user_data=boot)
        wait_ready(manager, [inst.id])
        assert ok(ssh(manager, inst.address, "stat -c %a /etc/xce/join-token; cat /etc/xce/join-token")) == (
            f"600\n{token}\n"
        )
        assert [i.user_data for i in store.list_instances()] == [user_data]
    finally:
        manager.shutdown(remove_lab=True)
        store.close()


def test_ssh_comes_up_late_when_asked(world: tuple[HostManager, FakeSource]) -> None:
    manager, source = world
    lab = manager.lab
    source.items = [InstanceView("i-l", name(1), addr(lab, 60), "running", tags={SSH_DELAY_TAG: "4s"})]
    manager.reconcile_once()
    assert manager.hosts["i-l"].poll() == "booting"
    assert ssh(manager, addr(lab, 60), "true").returncode == 255  # refused: sshd not up yet
    wait_ready(manager, ["i-l"])
    assert ok(ssh(manager, addr(lab, 60), "hostname")).strip() == name(1)


def test_the_console_shows_the_key_sshd_serves_before_sshd_is_up(world: tuple[HostManager, FakeSource]) -> None:
    """cloud-init's key block is on the console (as the cloud shows it, by instance id) while sshd
    is still delayed, and it is the key sshd then serves."""
    manager, source = world
    lab = manager.lab
    source.items = [InstanceView("i-c1", name(1), addr(lab, 70), "running", tags={SSH_DELAY_TAG: "4s"})]
    manager.reconcile_once()
    deadline = time.monotonic() + 30
    published = None
    while published is None and time.monotonic() < deadline:
        shown = console_output(manager.state_dir, "i-c1")
        published = published_keys(shown.text) if shown is not None else None
        time.sleep(0.1)
    assert published is not None and shown is not None and shown.address == addr(lab, 70)
    assert manager.hosts["i-c1"].poll() == "booting"  # published before sshd answers
    wait_ready(manager, ["i-c1"])
    assert published == keyscan(addr(lab, 70), 22, 15.0)


def test_restarted_manager_sweeps_what_a_crashed_one_left(tmp_path: Path, lab: labnet.LabConfig) -> None:
    source = FakeSource()
    source.items = [InstanceView("i-c", name(1), addr(lab, 70), "running")]
    first = HostManager(tmp_path / "sim", lab, source)
    first.start()
    wait_ready(first, ["i-c"])
    orphan = first.hosts["i-c"].proc
    assert orphan is not None
    # "Crash": the first manager forgets its hosts without tearing them down.
    first.hosts["i-c"]._close_log()
    first.hosts.clear()

    second = HostManager(tmp_path / "sim", lab, source)
    try:
        second.start()  # sweeps the leftovers
        assert orphan.wait(timeout=10) != 0
        assert lab.host_netns("i-c") not in labnet.netns_list()
        wait_ready(second, ["i-c"])
        assert ok(ssh(second, addr(lab, 70), "hostname")).strip() == name(1)
    finally:
        second.shutdown(remove_lab=True)
    assert not labnet.lab_exists(lab)


def test_a_lab_held_by_another_world_is_refused(tmp_path: Path, lab: labnet.LabConfig) -> None:
    first = HostManager(tmp_path / "one", lab, FakeSource())
    first.start()
    try:
        with pytest.raises(labnet.LabError, match="belongs to the simulated world at"):
            HostManager(tmp_path / "two", lab, FakeSource()).start()
        assert labnet.lab_exists(lab)  # the refused world removed nothing
    finally:
        first.shutdown(remove_lab=True)
    assert not labnet.lab_exists(lab)
