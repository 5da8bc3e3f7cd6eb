"""Faults of the fenced path: the simulated controller, the simulated cloud behind real Terraform.

Whatever is killed, whenever: after ``xceprov ops resume`` the instances in the simulated cloud
and the facts at the simulated controller agree exactly, none duplicated, none leaked. The
moment of each ``kill -9`` is found from outside (the audit log, the cloud store), never by a
crash switch in the product. Also: a lease revoked mid-apply stops Terraform (no create after
the revocation) and leaves the op resumable; a second holder makes the command line refuse; a
busy host is refused by ``destroy`` and drained by ``return``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cli_run
import pytest
from sim_controller_helpers import client_cert, connect, controller_block, controller_process, join_worker, worker_token

from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import Fact, LeaseGrant
from orchestrator.configfile import load_config
from orchestrator.errors import HostBusy
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import FactKind
from orchestrator.ops.openops import open_ops
from orchestrator.services.destroy import destroy
from orchestrator.services.ops import fenced_session
from orchestrator.services.ret import return_hosts
from orchestrator.sim.cloud.store import CloudStore, Instance
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TTL = 4.0


@dataclass
class World:
    """A simulated controller (its own process) and a site configured to use it."""

    ctl_state: Path
    address: str
    site: Path

    def settings(self, identity: str) -> ControllerSettings:
        cert, key = client_cert(self.ctl_state, "provisioner", identity)
        return ControllerSettings(
            addresses=[self.address],
            ca=self.ctl_state / "tls" / "ca.pem",
            client_cert=cert,
            client_key=key,
            connect_timeout=2.0,
            request_timeout=5.0,
            lease_margin=0.5,
        )

    @property
    def store(self) -> CloudStore:
        return CloudStore(self.site / "state" / "sim" / "cloud.sqlite")

    def alive(self) -> dict[str, Instance]:
        return {i.client_token: i for i in self.store.list_instances({"xce:cluster": "itest"})}

    def facts(self) -> list[Fact]:
        with ControllerLink(self.settings("reader"), instance_id="reader", providers=["sim"]) as link:
            link.open()
            return sorted(link.query_facts("sim"), key=lambda f: f.fact_id)

    def audit(self, pid: int | None = None) -> list[str]:
        path = self.site / "state" / "audit.log"
        if not path.exists():
            return []
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e["action"] for e in entries if pid is None or e.get("pid") == pid]

    def xceprov(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return cli_run.xceprov(self.site, *args, timeout=timeout)

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=self.site,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "XCEPROV_CONFIG": str(self.site / "xceprov.yaml")}

    def planned(self, name: str, *wanted: str) -> Path:
        done = self.xceprov("plan", *wanted, "--out", name)
        assert done.returncode == 0, done.stderr
        return self.site / name


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    # A long heartbeat: the test's worker connection sends none and must stay joined.
    with controller_process(tmp_path, ttl=TTL, heartbeat=30) as (ctl_state, address, _proc):
        site = tmp_path / "site"
        site.mkdir()
        w = World(ctl_state, address, site)
        (site / "xceprov.yaml").write_text(
            json.dumps(
                {
                    "cluster": "itest",
                    "state_dir": "state",
                    # One create at a time: a revocation lands between two creates, observably.
                    "terraform": {"parallelism": 1},
                    "controller": controller_block(ctl_state, address, "orch"),
                    "providers": {"sim": {"module": "xcesim", "max_instances": 20}},
                    "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
                }
            )
        )
        yield w


def agree(world: World) -> dict[str, Instance]:
    """Cloud and controller tell the same story: no open op, no duplicate, no leak."""
    facts = world.facts()
    alive = world.alive()
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED]
    gone = {f.instance_key for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    assert len(created) == len(set(created)), f"an instance recorded twice: {created}"
    assert set(created) - gone == set(alive), (created, gone, sorted(alive))
    ids = {f.instance_key: f.instance_id for f in facts if f.kind == FactKind.INSTANCE_CREATED}
    assert {k: i.id for k, i in alive.items()} == {k: ids[k] for k in alive}
    assert open_ops(facts) == []
    every = world.store.list_instances({"xce:cluster": "itest"}, include_terminated=True)
    tokens = [i.client_token for i in every]
    assert len(tokens) == len(set(tokens)), f"an instance created twice: {tokens}"
    return alive


def wait_until(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def kill9(proc: subprocess.Popen[str]) -> None:
    """``kill -9`` the command; it must still have been running (the fault is real, not a finished run)."""
    os.kill(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"finished before the kill: {stderr}"


def resume(world: World) -> None:
    """``xceprov ops resume`` until it is allowed (a revoked lease is refused until it expires)."""
    deadline = time.monotonic() + 6 * TTL + 120
    while True:
        done = world.xceprov("ops", "resume")
        if done.returncode == 0:
            break
        assert done.returncode == 9 and time.monotonic() < deadline, done.stderr
        time.sleep(0.5)
    listed = world.xceprov("ops", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [p["open"] for p in json.loads(listed.stdout)["providers"]] == [[]]


CREATE_POINTS: dict[str, tuple[float, Callable[[World, int], bool]]] = {
    "after the intent": (1.5, lambda w, pid: "fact-requestIntent" in w.audit(pid)),
    "during the apply": (1.5, lambda w, pid: "op-apply" in w.audit(pid)),
    "after the apply, before the instance facts": (0.0, lambda w, pid: len(w.alive()) == 2),
}


@pytest.mark.parametrize("point", sorted(CREATE_POINTS))
def test_kill_during_a_create_then_resume_agrees(world: World, point: str) -> None:
    slow, reached = CREATE_POINTS[point]
    bundle = world.planned("b", "cpu=2")
    world.store.set_slow_launch(slow)
    proc = world.spawn("apply", str(bundle))
    wait_until(point, lambda: reached(world, proc.pid) or proc.poll() is not None)
    kill9(proc)
    world.store.set_slow_launch(0.0)
    resume(world)
    alive = agree(world)
    # Completed (both instances) or, killed before the desired set was written, abandoned (none).
    assert len(alive) in (0, 2)
    if point != "after the intent":
        assert len(alive) == 2


# A start of warm-pool instances as a process of its own (no verb starts pool instances by hand:
# the daemon's pass does; the script is the executor the pass uses).
START_SCRIPT = """
import sys
from pathlib import Path
from orchestrator.configfile import load_config
from orchestrator.services.ops import fenced_session
with fenced_session(load_config(sys.argv[1]), ["sim"], Path(sys.argv[2])) as ops:
    ops.executor.start_pool("sim", "cpu", sys.argv[3:])
"""


def start_op(world: World, *keys: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", START_SCRIPT, str(world.site / "xceprov.yaml"), str(ROOT), *keys],
        cwd=world.site,
        env=world.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


START_POINTS: dict[str, tuple[float, Callable[[World, int], bool]]] = {
    "after the start intent": (1.5, lambda w, pid: "fact-requestIntent" in w.audit(pid)),
    "during the start apply": (1.5, lambda w, pid: "op-apply" in w.audit(pid)),
    "after the start apply, before the expected hosts": (
        0.0,
        lambda w, pid: sorted(i.state for i in w.alive().values()) == ["running", "running"],
    ),
}


@pytest.mark.parametrize("point", sorted(START_POINTS))
def test_kill_during_a_warm_pool_start_then_resume_agrees(world: World, point: str) -> None:
    with fenced_session(load_config(str(world.site / "xceprov.yaml")), ["sim"], ROOT) as ops:
        ops.executor.create("sim", "cpu", 2, pool=True)  # the fill, released before the start
    keys = sorted(world.alive())
    assert [i.state for i in world.alive().values()] == ["stopped", "stopped"]
    slow, reached = START_POINTS[point]
    world.store.set_slow_launch(slow)  # a start boots the instance: slowed like a launch
    proc = start_op(world, *keys)
    wait_until(point, lambda: reached(world, proc.pid) or proc.poll() is not None)
    kill9(proc)
    world.store.set_slow_launch(0.0)
    resume(world)
    alive = agree(world)
    # The intent named both keys: resume started them, each expected once, of the start op.
    assert {k: (i.state, "xce:pool" in i.tags) for k, i in alive.items()} == {k: ("running", False) for k in keys}
    expected = [f for f in world.facts() if f.kind == FactKind.EXPECTED_HOST]
    assert sorted(f.instance_key for f in expected) == keys
    assert len({f.op_id for f in expected}) == 1


RETURN_POINTS: dict[str, Callable[[list[str]], bool]] = {
    "after the returning intent": lambda actions: "fact-returning" in actions,
    "during the destroy": lambda actions: "fact-returning" in actions and "op-apply" in actions,
}


@pytest.mark.parametrize("point", sorted(RETURN_POINTS))
def test_kill_during_a_destroy_then_resume_agrees(world: World, point: str) -> None:
    done = world.xceprov("apply", str(world.planned("b", "cpu=2")))
    assert done.returncode == 0, done.stderr
    assert len(agree(world)) == 2
    proc = world.spawn("destroy", "--all")
    wait_until(point, lambda: RETURN_POINTS[point](world.audit(proc.pid)) or proc.poll() is not None)
    kill9(proc)
    resume(world)
    alive = agree(world)
    # Every instance whose returning intent was committed is gone; one killed before its own
    # intent was never asked to go (the operator runs destroy again), and the facts say so.
    returning = {f.instance_key for f in world.facts() if f.kind == FactKind.RETURNING}
    assert not set(alive) & returning
    if point == "during the destroy":
        assert alive == {}


def test_a_revoked_lease_stops_terraform_and_the_op_resumes(world: World) -> None:
    bundle = world.planned("b", "cpu=4")
    world.store.set_slow_launch(1.0)
    proc = world.spawn("apply", str(bundle))
    wait_until("the first instance", lambda: len(world.alive()) >= 1 or proc.poll() is not None)
    admin.revoke(world.ctl_state, "sim", "test")
    at_revocation = len(world.alive())
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 6, stderr
    assert "revoked" in stderr and "resumable" in stderr
    # The create in flight may finish; none starts after the revocation.
    after = len(world.alive())
    assert after <= at_revocation + 1 and after < 4
    assert "op-apply-interrupted" in world.audit(proc.pid)
    world.store.set_slow_launch(0.0)
    resume(world)
    assert len(agree(world)) == 4


def test_a_second_holder_makes_the_command_line_refuse(world: World) -> None:
    bundle = world.planned("b", "cpu=1")
    with ControllerLink(world.settings("daemon"), instance_id="daemon", providers=["sim"]) as other:
        other.open()
        assert isinstance(other.acquire("sim"), LeaseGrant)
        # Renewed in the background, as a daemon does: on a loaded machine the command can take
        # longer than one lease TTL to reach the controller.
        keeper = LeaseManager(other, ["sim"], margin=2.0, holder_id="daemon")
        join_lease_manager(other, keeper)
        keeper.step()
        keeper.start()
        try:
            done = world.xceprov("apply", str(bundle))
        finally:
            keeper.close(release=True)
    assert done.returncode == 9
    [line] = done.stderr.splitlines()
    # The holder is the other process (identity and process instance), named with what to do.
    assert re.search(r"provider sim: the lease is held by daemon/daemon\.\d+\.[0-9a-f]{16} \(.+\); retry in", line)
    assert world.alive() == {} and world.facts() == []


def test_a_busy_host_is_refused_by_destroy_and_drained_by_return(world: World) -> None:
    loaded = load_config(str(world.site / "xceprov.yaml"))
    plays: list[str] = []

    def decommission(provider: str, hosts: Any) -> dict[str, str]:
        plays.extend(h.host_name for h in hosts)
        return {h.host_name: "ok" for h in hosts}

    with fenced_session(loaded, ["sim"], ROOT, decommission=decommission) as ops:
        [made] = ops.executor.create("sim", "cpu", 1).created
        host, port = world.address.rsplit(":", 1)
        worker = connect((host, int(port)), world.ctl_state / "tls" / "ca.pem")
        try:
            token = worker_token(world.ctl_state, made.key, made.name)
            joined = join_worker(worker, made.name, made.instance_id, token=token, instance_key=made.key)
            assert joined.kind == "joined", joined.body
            admin.submit(world.ctl_state, "cpu", 1, 15.0)  # outlasts the destroy attempt

            def state() -> str:
                return {h.instance_key: h.state for h in ops.parts.hosts.hosts("sim")}.get(made.key, "")

            wait_until("the host runs work", lambda: state() == "busy", timeout=30)
            with pytest.raises(HostBusy, match=f"{made.name}: joined and running work"):
                destroy(loaded, ROOT, all_instances=True, wired=ops)
            assert set(world.alive()) == {made.key}
            [result] = return_hosts(loaded, ROOT, [made.name], drain_timeout=60, wired=ops)
        finally:
            worker.close()
    assert result.drained == [made.key] and plays == [made.name]
    actions = world.audit()
    assert actions.index("op-return-refused") < actions.index("op-drain") < actions.index("fact-returning")
    assert agree(world) == {}


def children(parent: int, module: str) -> list[int]:
    """Pids of the ``python -m MODULE`` processes that ``parent`` started (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and module.encode() in cmdline:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_terraform_worker_stops_gracefully_when_xceprov_is_killed(world: World) -> None:
    bundle = world.planned("b", "cpu=6")
    world.store.set_slow_launch(1.0)  # six creates one at a time: the kill lands mid-apply
    proc = world.spawn("apply", str(bundle))
    wait_until("the first instance", lambda: len(world.alive()) >= 1 or proc.poll() is not None)
    [worker] = children(proc.pid, "orchestrator.clients.terraform._worker")
    # The provider: attached (started by xceprov, its input held by the worker alone), or
    # launched by Terraform inside the worker when attaching is off.
    provider = "orchestrator.sim.cloud.provider"
    plugins = children(proc.pid, provider) + children(worker, provider)
    assert plugins
    kill9(proc)
    at_kill = len(world.alive())
    # The worker (its own session: the kill did not reach it) sees its parent's pipe end and
    # interrupts Terraform once: the create in flight finishes, the state is written, it exits.
    wait_until("the worker to exit", lambda: not running(worker), timeout=30)
    stopped = len(world.alive())
    assert at_kill <= stopped <= at_kill + 1 and stopped < 6
    # Terraform ended its own way, not cut off: its provider ended with it (an attached one
    # outlived xceprov until the worker was done with it) and its lock was released...
    wait_until("the provider to stop", lambda: not any(running(p) for p in plugins), timeout=30)
    work = world.site / "state" / "work"
    assert not list(work.rglob(".terraform.tfstate.lock.info"))
    # ... and what the cloud holds is what its state lists.
    state = json.loads(next(work.rglob("terraform.tfstate")).read_text())
    in_state = {i["index_key"] for r in state["resources"] if r["type"] == "xcesim_instance" for i in r["instances"]}
    assert in_state == set(world.alive())
    world.store.set_slow_launch(0.0)
    resume(world)  # Terraform is gone: no state lock is held by an orphan
    assert len(agree(world)) == 6
