"""A whole simulated world for fault tests: ``xceprov sim up`` on a test configuration.

Unlike ``tests/sim_controller_helpers.py`` (a controller started by the test itself), this is
the product's own world (controller, cloud, and with root the simulated hosts over real SSH in
the test's own lab), driven only through the command line, as an operator would. Each world has
its own state directories, controller port, cluster name and lab, and ``close`` tears it all
down (``xceprov sim down``) whatever happened; the caller that claimed the lab removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from sim_controller_helpers import client_cert, free_port

from orchestrator.clients.ansible.playkill import stop_then_kill
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import Fact, HostInfo
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import FactKind
from orchestrator.ops.openops import open_ops
from orchestrator.sim.cloud.store import CloudStore, Instance
from orchestrator.sim.hosts import lab as labnet

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SimWorld:
    """One running simulated world and the site configuration that uses it."""

    site: Path
    cluster: str
    port: int
    lab: labnet.LabConfig | None

    @property
    def sim(self) -> Path:
        """The world's state directory (cloud store, controller state, TLS, hosts)."""
        return self.site / "sim"

    @property
    def state(self) -> Path:
        """The orchestrator's state directory (audit log, working directories)."""
        return self.site / "state"

    def env(self) -> dict[str, str]:
        """The environment every command runs with: this world's configuration."""
        return {**os.environ, "XCEPROV_CONFIG": str(self.site / "xceprov.yaml")}

    def xceprov(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run one command to its end."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=self.site,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, timeout: float = 300) -> str:
        """Run one command that must succeed; its standard output."""
        done = self.xceprov(*args, timeout=timeout)
        assert done.returncode == 0, f"xceprov {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        return done.stdout

    def ok_once_leased(self, *args: str, within: float = 300) -> str:
        """Run one command that must succeed, again while it is refused with exit 9: a command
        killed with kill -9 keeps its lease (it is another holder) until the lease's TTL runs out."""
        deadline = time.monotonic() + within
        while True:
            done = self.xceprov(*args)
            if done.returncode != 9 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert done.returncode == 0, f"xceprov {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        return done.stdout

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        """Start one command in its own session (so that a kill can take its whole process tree)."""
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=self.site,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def bundle(self, name: str, *wanted: str) -> Path:
        """``xceprov plan WANTED --out NAME``."""
        self.ok("plan", *wanted, "--out", name)
        return self.site / name

    # -- what the world holds -----------------------------------------------------------------

    @property
    def store(self) -> CloudStore:
        """The simulated cloud."""
        return CloudStore(self.sim / "cloud.sqlite")

    def alive(self) -> dict[str, Instance]:
        """This cluster's live instances by instance key (the cloud's idempotency token)."""
        return {i.client_token: i for i in self.store.list_instances({"xce:cluster": self.cluster})}

    def _link(self) -> ControllerLink:
        cert, key = client_cert(self.sim, "provisioner", "test-reader")
        settings = ControllerSettings(
            addresses=[f"127.0.0.1:{self.port}"],
            ca=self.sim / "tls" / "ca.pem",
            client_cert=cert,
            client_key=key,
            connect_timeout=2.0,
            request_timeout=5.0,
            lease_margin=0.5,
        )
        return ControllerLink(settings, instance_id="test-reader", providers=["sim"])

    def facts(self) -> list[Fact]:
        """Every fact of provider ``sim`` at the controller, in commit order."""
        with self._link() as link:
            link.open()
            return sorted(link.query_facts("sim"), key=lambda f: f.fact_id)

    def hosts(self) -> dict[str, HostInfo]:
        """The controller's hosts of provider ``sim`` by instance key."""
        with self._link() as link:
            link.open()
            return {h.instance_key: h for h in link.host_status(provider="sim") if h.instance_key}

    def audit(self, pid: int | None = None) -> list[dict[str, Any]]:
        """The audit log's entries (of one process when ``pid`` is given)."""
        path = self.state / "audit.log"
        if not path.exists():
            return []
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in entries if pid is None or e.get("pid") == pid]

    def actions(self, pid: int | None = None) -> list[str]:
        """The audit log's actions, oldest first."""
        return [str(e["action"]) for e in self.audit(pid)]

    def open_ops(self) -> list[Any]:
        """``xceprov ops --json``: the open ops of provider ``sim``."""
        [provider] = json.loads(self.ok("ops", "--json"))["providers"]
        return list(provider["open"])


class Agreeing(Protocol):
    """What :func:`agree` reads of a world (``SimWorld`` and the reconcile tests' world fit)."""

    cluster: str

    @property
    def store(self) -> CloudStore: ...

    def facts(self) -> list[Fact]: ...

    def alive(self) -> dict[str, Instance]: ...


def agree(world: Agreeing) -> dict[str, Instance]:
    """Cloud and controller tell the same story: no open op, no duplicate, no leak; the live instances."""
    facts = world.facts()
    alive = world.alive()
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED]
    gone = {f.instance_key for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    assert len(created) == len(set(created)), f"an instance recorded twice: {created}"
    assert set(created) - gone == set(alive), (created, sorted(gone), sorted(alive))
    ids = {f.instance_key: f.instance_id for f in facts if f.kind == FactKind.INSTANCE_CREATED}
    assert {k: i.id for k, i in alive.items()} == {k: ids[k] for k in alive}
    assert open_ops(facts) == []
    every = world.store.list_instances({"xce:cluster": world.cluster}, include_terminated=True)
    tokens = [i.client_token for i in every]
    assert len(tokens) == len(set(tokens)), f"an instance created twice: {tokens}"
    return alive


def wait_until(what: str, check: Callable[[], bool], timeout: float = 120.0, every: float = 0.1) -> None:
    """Poll ``check`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(_children(current))
    return tree


def kill9_tree(proc: subprocess.Popen[str]) -> None:
    """``kill -9`` the command and everything it started (the play's ansible processes too), as a
    crash of the machine's session would; it must still have been running (a real fault)."""
    assert proc.poll() is None, f"finished before the kill: {proc.communicate()[1]}"
    # The whole tree is stopped first, so that nothing forks or re-parents while it is being killed.
    stop_then_kill(lambda: process_tree(proc.pid))
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def one_region(cfg: dict[str, Any]) -> None:
    """Drop the built-in second region, ``spot``, from a configuration built from the defaults:
    these tests are about one provider's hosts (spot is there for the demo's fallback;
    tests/integration/test_reconcile_pass.py tests fallback)."""
    cfg["providers"].pop("spot", None)
    for template in cfg["templates"].values():
        template["providers"].pop("spot", None)


def _site_config(site: Path, cluster: str, port: int, lab: labnet.LabConfig | None) -> dict[str, Any]:
    sim = site / "sim"
    cfg: dict[str, Any] = yaml.safe_load((ROOT / "orchestrator" / "defaults" / "xceprov.yaml").read_text())
    gateway = lab.gateway if lab is not None else "127.0.0.1"
    cfg.update(
        {
            "cluster": cluster,
            "state_dir": str(site / "state"),
            "sim": {"state_dir": str(sim)},
            "controller": {
                "addresses": [f"127.0.0.1:{port}"],
                "worker_addresses": [f"{gateway}:{port}"],
                "ca": str(sim / "tls" / "ca.pem"),
                "client_cert": str(sim / "client" / "provisioner.pem"),
                "client_key": str(sim / "client" / "provisioner.key"),
                "join_key": str(sim / "client" / "join.key"),
                "connect_timeout": 2,
                "request_timeout": 5,
            },
        }
    )
    cfg.pop("ansible", None)  # the bootstrap finds the simulated world's key itself
    one_region(cfg)
    provider = cfg["providers"]["sim"]
    provider.update({"max_instances": 20, "drain_policy": "wait", "drain_timeout": "120s"})
    return cfg


@contextlib.contextmanager
def sim_world(site: Path, cluster: str, lab: labnet.LabConfig | None = None) -> Iterator[SimWorld]:
    """``xceprov sim up`` (with ``lab``: the simulated hosts too; without: the controller alone)."""
    site.mkdir(parents=True, exist_ok=True)
    port = free_port()
    world = SimWorld(site, cluster, port, lab)
    (site / "xceprov.yaml").write_text(yaml.safe_dump(_site_config(site, cluster, port, lab)))
    try:
        # The controller's port comes from the configuration's controller.addresses, and the
        # world's cloud hands out addresses inside its lab: nothing else to set.
        if lab is None:
            world.ok("sim", "up", "--only", "controller")
        else:
            world.ok("sim", "up", "--lab-name", lab.name, "--lab-subnet", str(lab.subnet))
        assert (world.sim / "tls" / "ca.pem").exists(), "the simulated controller did not start"
        yield world
    finally:
        done = world.xceprov("sim", "down", timeout=120)
    # Reached only when the body passed: a failed teardown then fails the test (never masks a failure).
    assert done.returncode == 0, done.stderr


def can_run_hosts() -> bool:
    """Whether simulated hosts can run here: root, and pycapnp for the node manager artifact."""
    try:
        import capnp  # noqa: F401  (the simulated node manager bundles pycapnp)
    except ImportError:
        return False
    return os.geteuid() == 0


@contextlib.contextmanager
def world_with_hosts(site: Path, cluster: str, tag: str) -> Iterator[SimWorld]:
    """:func:`sim_world` with simulated hosts in a test lab of its own (claimed with ``tag``,
    removed at the end); the caller skips first when :func:`can_run_hosts` is false."""
    from sim_labs import claim_test_lab

    lab = claim_test_lab(tag)
    try:
        with sim_world(site, cluster, lab) as world:
            yield world
    finally:
        labnet.destroy_lab(lab)
