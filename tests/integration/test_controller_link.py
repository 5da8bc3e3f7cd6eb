"""The controller link, the lease manager and the simulated node manager against the simulated
controller (a real process on loopback, TLS with its generated CA)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import Epoch, Fact, LeaseDenied, LeaseGrant
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import ControllerSettings
from orchestrator.sim.controller import admin
from orchestrator.sim.nodemanager import build_artifact

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sim_controller_helpers import (  # noqa: E402
    client_cert,
    connect,
    controller_process,
    free_port,
    join_worker,
    wait_for,
    worker_token,
)

TTL = 3.0
MARGIN = 0.5


@dataclass
class SimController:
    state_dir: Path
    address: str
    proc: subprocess.Popen[bytes]

    @property
    def ca(self) -> Path:
        return self.state_dir / "tls" / "ca.pem"

    def settings(self, identity: str = "orch", **kw: Any) -> ControllerSettings:
        # The simulated controller requires a provisioner certificate; its identity is the holder.
        cert, key = client_cert(self.state_dir, "provisioner", identity)
        base: dict[str, Any] = {
            "addresses": [self.address],
            "ca": self.ca,
            "connect_timeout": 2.0,
            "request_timeout": 2.0,
            "lease_margin": MARGIN,
            "client_cert": cert,
            "client_key": key,
        }
        base.update(kw)
        return ControllerSettings(**base)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[SimController]:
    with controller_process(tmp_path, ttl=TTL, heartbeat=0.5) as (state, address, proc):
        yield SimController(state, address, proc)


@dataclass
class Recorder:
    """Wraps the link as the lease transport and records every validity interval granted."""

    link: ControllerLink
    name: str
    intervals: list[tuple[float, float, Epoch]] = field(default_factory=list)

    def _record(self, sent: float, answer: LeaseGrant | LeaseDenied) -> LeaseGrant | LeaseDenied:
        if isinstance(answer, LeaseGrant):
            self.intervals.append((sent, sent + answer.ttl - MARGIN, answer.epoch))
        return answer

    def acquire(self, provider: str, previous: Epoch | None) -> LeaseGrant | LeaseDenied:
        sent = time.monotonic()
        return self._record(sent, self.link.acquire(provider, previous))

    def renew(self, provider: str, epoch: Epoch) -> LeaseGrant | LeaseDenied:
        sent = time.monotonic()
        return self._record(sent, self.link.renew(provider, epoch))

    def release(self, provider: str, epoch: Epoch) -> None:
        self.link.release(provider, epoch)


@dataclass
class Orchestrator:
    link: ControllerLink
    recorder: Recorder
    leases: LeaseManager

    def close(self, release: bool = True) -> None:
        self.leases.close(release=release)
        self.link.close()


def orchestrator(ctl: SimController, name: str, providers: list[str]) -> Orchestrator:
    link = ControllerLink(ctl.settings(name), instance_id=name, providers=providers, cluster="test")
    recorder = Recorder(link, name)
    leases = LeaseManager(recorder, providers, margin=MARGIN, holder_id=name, retry_interval=0.2)
    join_lease_manager(link, leases)
    link.start()
    leases.start()
    return Orchestrator(link, recorder, leases)


def stop_process(pid: int) -> None:
    """SIGSTOP and wait until every thread of the process is stopped (delivery is asynchronous)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        tasks = Path(f"/proc/{pid}/task")
        states = []
        for task in tasks.iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        return bool(states) and all(s in ("T", "t") for s in states)

    wait_for("the controller to stop", stopped, timeout=10)


def overlaps(a: list[tuple[float, float, Epoch]], b: list[tuple[float, float, Epoch]]) -> list[str]:
    return [f"{x} overlaps {y}" for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


def test_one_holder_at_a_time_across_crash_and_failover(controller: SimController) -> None:
    a = orchestrator(controller, "orch-a", ["p1"])
    b: Orchestrator | None = None
    a2: Orchestrator | None = None
    both: list[float] = []
    stop = threading.Event()
    holders: list[Orchestrator] = [a]

    def sampler() -> None:
        while not stop.is_set():
            valid = [o.recorder.name for o in list(holders) if o.leases.valid("p1")]
            if len(valid) > 1:
                both.append(time.monotonic())
            time.sleep(0.002)

    watcher = threading.Thread(target=sampler, daemon=True)
    watcher.start()
    try:
        wait_for("orch-a to hold p1", lambda: a.leases.valid("p1"))
        epoch_a = a.leases.gate("p1")
        a.link.commit_fact(Fact("requestIntent", "p1", "op-a", epoch_a, template="cpu", count=1))

        b = orchestrator(controller, "orch-b", ["p1"])
        holders.append(b)
        time.sleep(1.0)
        assert not b.leases.valid("p1")
        with pytest.raises(LeaseLost, match="held by orch-a"):
            b.leases.gate("p1")

        # orch-a dies without releasing: orch-b gets the lease only after orch-a's TTL.
        a.close(release=False)
        wait_for("orch-b to take over p1", lambda: b is not None and b.leases.valid("p1"), timeout=TTL * 4)
        epoch_b = b.leases.gate("p1")
        assert epoch_b > epoch_a
        b.link.commit_fact(Fact("requestIntent", "p1", "op-b", epoch_b, template="cpu", count=1))
        # A fact with orch-a's (stale) epoch is rejected.
        with pytest.raises(LeaseLost, match="stale epoch"):
            b.link.commit_fact(Fact("requestIntent", "p1", "op-x", epoch_a, template="cpu", count=1))

        # orch-a comes back and competes; then the controller fails over.
        a2 = orchestrator(controller, "orch-a", ["p1"])
        holders.append(a2)
        resyncs: list[dict[str, list[Fact]]] = []
        b.link.on_resync(resyncs.append)
        term_before = b.link.state().term
        admin.failover(controller.state_dir)
        wait_for("orch-b to rejoin in the new term", lambda: b is not None and b.link.state().term > term_before)
        # The previous holder (by the epoch on its latest fact) is re-granted at once, in the new term.
        wait_for(
            "orch-b's new-term lease",
            lambda: b is not None and b.leases.valid("p1") and b.leases.gate("p1").term > epoch_b.term,
            timeout=TTL * 2,
        )
        assert b.link.state().reconnects >= 1
        wait_for("orch-b's resync", lambda: bool(resyncs))
        assert {"op-b"} <= {f.op_id for f in resyncs[-1]["p1"]}
        with pytest.raises(LeaseLost, match="stale epoch"):
            b.link.commit_fact(Fact("requestIntent", "p1", "op-y", epoch_b, template="cpu", count=1))
        time.sleep(TTL + 1.5)  # past the grace: orch-a still does not get it while orch-b renews
        assert a2.leases.valid("p1") is False
    finally:
        stop.set()
        watcher.join()
        for o in (a, b, a2):
            if o is not None:
                o.close()
    assert both == [], "two orchestrators held a valid lease at the same instant"
    assert b is not None and a2 is not None
    assert overlaps(a.recorder.intervals + a2.recorder.intervals, b.recorder.intervals) == []


def test_a_standby_redirects_to_the_primary(controller: SimController, tmp_path: Path) -> None:
    standby_address = f"127.0.0.1:{free_port()}"
    state = tmp_path / "standby"
    state.mkdir()
    # The standby must present a certificate from the same CA: share the primary's TLS files.
    (state / "tls").symlink_to(controller.state_dir / "tls")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.controller",
            "serve",
            "--state-dir",
            str(state),
            "--listen",
            standby_address,
            "--redirect",
            controller.address,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        host, port = standby_address.rsplit(":", 1)

        def up() -> bool:
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
            except OSError:
                return False
            return True

        wait_for("the standby", up)
        settings = controller.settings(addresses=[standby_address])
        with ControllerLink(settings, instance_id="orch-r", providers=["p1"]) as link:
            state_ = link.open()
            assert state_.address == controller.address
            assert isinstance(link.acquire("p1"), LeaseGrant)
    finally:
        proc.terminate()
        proc.wait(10)


def test_controller_going_away_mid_request_raises_and_never_hangs(controller: SimController) -> None:
    link = ControllerLink(controller.settings("orch-c", request_timeout=30.0), instance_id="orch-c", providers=["p1"])
    try:
        link.open()
        stop_process(controller.proc.pid)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                link.acquire("p1")
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.3)
        os.kill(controller.proc.pid, signal.SIGKILL)
        t.join(10)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], ControllerError)
        assert "lost mid-request" in str(errors[0])
    finally:
        link.close()


def test_a_silent_controller_times_out(controller: SimController) -> None:
    link = ControllerLink(controller.settings("orch-d", request_timeout=0.5), instance_id="orch-d", providers=["p1"])
    try:
        link.open()
        stop_process(controller.proc.pid)
        with pytest.raises(ControllerError, match="no reply"):
            link.acquire("p1")
    finally:
        os.kill(controller.proc.pid, signal.SIGCONT)
        link.close()


def test_tls_wrong_ca_and_wrong_host_name(controller: SimController, tmp_path: Path) -> None:
    from orchestrator.sim import pki

    other = tmp_path / "other-ca.pem"
    pki.make_ca("not the controller's CA").write(other, tmp_path / "other-ca.key")
    with (
        ControllerLink(controller.settings(ca=other), instance_id="x") as link,
        pytest.raises(ControllerError, match="not signed by the configured CA"),
    ):
        link.open()
    with (
        ControllerLink(controller.settings(server_name="elsewhere.example"), instance_id="x") as link,
        pytest.raises(ControllerError, match="host name mismatch"),
    ):
        link.open()


def test_lease_keeper_process_gates_releases_and_obeys_revocation(controller: SimController) -> None:
    keeper = LeaseKeeper(controller.settings("orch-k"), instance_id="orch-k", providers=["p1", "p2"])
    other: Orchestrator | None = None
    try:
        keeper.start()
        wait_for("the keeper's leases", lambda: keeper.valid("p1") and keeper.valid("p2"))
        other = orchestrator(controller, "orch-l", ["p1"])
        epoch = keeper.gate("p1")
        # The orchestrator's own link commits facts under the keeper's lease (same instance id).
        link = ControllerLink(controller.settings("orch-k"), instance_id="orch-k", providers=["p1", "p2"])
        keeper.attach(link)
        link.open()
        try:
            link.commit_fact(Fact("requestIntent", "p1", "op-k", epoch, template="cpu", count=1))
            statuses = {s.provider: s for s in keeper.status()}
            assert statuses["p1"].held and statuses["p1"].epoch == epoch
            time.sleep(0.5)
            assert not other.leases.valid("p1")
            # A revocation closes the gate at once.
            admin.revoke(controller.state_dir, "p2", "test")
            wait_for("the revocation", lambda: not keeper.valid("p2"), timeout=5)
        finally:
            link.close()
        # A clean close releases: the other orchestrator gets p1 without waiting for the TTL.
        keeper.close(release=True)
        leases = {x["provider"]: x for x in admin.status(controller.state_dir)["leases"]}
        assert "p1" not in leases or not leases["p1"]["holder"].startswith("orch-k/")
        wait_for(
            "orch-l to get the released lease", lambda: other is not None and other.leases.valid("p1"), timeout=TTL * 3
        )
    finally:
        keeper.close()
        if other is not None:
            other.close()


def status_config(tmp_path: Path, addresses: list[str], ca: Path) -> Path:
    cfg = tmp_path / "xceprov.yaml"
    cert, key = client_cert(ca.parents[1], "provisioner", "orch-status")
    cfg.write_text(
        json.dumps(
            {
                "cluster": "test",
                "state_dir": str(tmp_path / "state"),
                "controller": {
                    "addresses": addresses,
                    "ca": str(ca),
                    "connect_timeout": 2,
                    "request_timeout": 5,
                    "client_cert": str(cert),
                    "client_key": str(key),
                },
                "providers": {"sim": {"module": "xcesim"}},
                "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
            }
        )
    )
    return cfg


def xceprov(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_status_shows_link_leases_demand_and_open_ops(controller: SimController, tmp_path: Path) -> None:
    orch = orchestrator(controller, "orch-s", ["sim"])
    try:
        wait_for("the lease", lambda: orch.leases.valid("sim"))
        epoch = orch.leases.gate("sim")
        orch.link.commit_fact(Fact("requestIntent", "sim", "op-00000002-aaaaaa", epoch, template="cpu", count=2))
        admin.submit(controller.state_dir, "cpu", 3, 60.0)
        cfg = status_config(tmp_path, [controller.address], controller.ca)
        out = xceprov("--config", str(cfg), "status", "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["link"]["address"] == controller.address and report["term"] >= 1
        # The holder: the certificate's identity and the holding process's instance.
        holder = f"orch-s/{orch.link.lease_instance}"
        assert [(x["provider"], x["holder"], x["epoch"]) for x in report["leases"]] == [("sim", holder, epoch.tag())]
        assert {d["template"]: d["wanted"] for d in report["demand"]}["cpu"] == 3
        assert [(o["op_id"], o["action"], o["done"], o["wanted"]) for o in report["open_ops"]] == [
            ("op-00000002-aaaaaa", "create", 0, 2)
        ]
        text = xceprov("--config", str(cfg), "status")
        assert text.returncode == 0 and f"holder {holder}" in text.stdout
    finally:
        orch.close()


def test_status_names_the_addresses_tried_when_unreachable(tmp_path: Path) -> None:
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    cfg = status_config(tmp_path, [a, b], tmp_path / "ca.pem")
    out = xceprov("--config", str(cfg), "status")
    assert out.returncode == 75
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and a in lines[0] and b in lines[0] and "unreachable" in lines[0]
    # What needs no controller is still shown: is a daemon running here, is a breaker open.
    assert "no daemon (none has run with this state_dir)" in out.stdout and "breakers" in out.stdout
    as_json = xceprov("--config", str(cfg), "status", "--json")
    assert as_json.returncode == 75
    doc = json.loads(as_json.stdout)
    assert doc["controller"]["reachable"] is False and a in doc["controller"]["error"]
    assert doc["daemon"] is None and doc["breakers"] == []


# -- the simulated node manager ---------------------------------------------------------------


def plain_python3() -> str | None:
    """A python3 outside this virtualenv with the same ABI (what a simulated host runs)."""
    venv = Path(sys.prefix).resolve()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(entry) / "python3"
        if not entry or not candidate.is_file() or venv in candidate.resolve().parents:
            continue
        if Path(entry).resolve() == Path(sys.prefix).resolve() / "bin":
            continue
        probe = "import sys; print(sys.implementation.cache_tag, sys.executable)"
        out = subprocess.run([str(candidate), "-c", probe], capture_output=True, text=True, check=False)
        tag, _, executable = out.stdout.strip().partition(" ")
        if tag == sys.implementation.cache_tag and executable:
            return executable  # the real interpreter, not a shim script
    return None


def node_config(ctl: SimController, roles: list[str], host: str, instance_id: str) -> dict[str, Any]:
    token = ctl.state_dir.parent / f"{host}.token"  # the worker's credential, as the bootstrap installs it
    token.write_text(worker_token(ctl.state_dir, "op-00000001-abcdef-000", host) + "\n")
    return {
        "roles": roles,
        "controller": {"addresses": [ctl.address], "ca_file": str(ctl.ca)},
        "template": "cpu",
        "host_name": host,
        "instance_id": instance_id,
        "instance_key": "op-00000001-abcdef-000",
        "op_id": "op-00000001-abcdef",
        "heartbeat_interval": 0.5,
        "join_token_file": str(token),
    }


def read_state(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def test_node_manager_joins_is_matched_restarts_and_decommission_stops_it(
    controller: SimController, tmp_path: Path
) -> None:
    python3 = plain_python3()
    if python3 is None:
        pytest.skip("no python3 outside the virtualenv with the same ABI")
    artifact = build_artifact(tmp_path / "dist")
    opt = tmp_path / "opt-xce"
    with tarfile.open(artifact) as tar:
        tar.extractall(opt, filter="data")
    config = tmp_path / "node-manager.json"
    state = tmp_path / "nm.state"
    pidfile = tmp_path / "nm.pid"
    instance_id = f"i-{os.getpid():x}"
    host = f"nm-{os.getpid()}"
    config.write_text(json.dumps(node_config(controller, ["worker"], host, instance_id)))

    # The orchestrator records the expected host under its lease.
    orch = orchestrator(controller, "orch-nm", ["sim"])
    nm_log = open(tmp_path / "nm.log", "wb")  # noqa: SIM115 - closed below
    env = {"PATH": os.path.dirname(python3), "LANG": "C.UTF-8"}  # no venv, no PYTHONPATH
    nm = subprocess.Popen(
        [
            python3,
            str(opt / "bin" / "xce-node-manager"),
            "--config",
            str(config),
            "--state-file",
            str(state),
            "--pidfile",
            str(pidfile),
            "--reload-interval",
            "0.3",
        ],
        stdout=nm_log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_for("the orchestrator's lease", lambda: orch.leases.valid("sim"))
        epoch = orch.leases.gate("sim")
        orch.link.commit_fact(
            Fact(
                "expectedHost",
                "sim",
                "op-00000001-abcdef",
                epoch,
                instance_key="op-00000001-abcdef-000",
                instance_id=instance_id,
                template="cpu",
                host_name=host,
                address="127.0.0.1",
                join_deadline=time.time() + 600,
            )
        )

        def matched() -> bool:
            return any(
                h.instance_id == instance_id and h.provider == "sim" and h.state == "idle"
                for h in orch.link.host_status(provider="sim")
            )

        wait_for("the worker to join and be matched to its expected host", matched)
        assert pidfile.read_text().strip() == str(nm.pid)

        # A dying worker is restarted and rejoins.
        first = read_state(state)["worker_pid"]
        os.kill(first, signal.SIGKILL)
        wait_for(
            "the worker's restart",
            lambda: read_state(state).get("restarts") == 1 and read_state(state).get("worker_pid") not in (None, first),
        )
        wait_for("the rejoin", matched)  # the same token again, from the instance that used it

        # The token the worker joined with (v2, single use) admits no other instance, whoever sends it.
        token = (controller.state_dir.parent / f"{host}.token").read_text().strip()
        assert token.startswith("v2.")
        host_port = controller.address.rsplit(":", 1)
        copy = connect((host_port[0], int(host_port[1])), controller.ca)
        try:
            again = join_worker(copy, host, "i-copy", token=token, instance_key="op-00000001-abcdef-000")
        finally:
            copy.close()
        assert (again.kind, again.body["code"]) == ("error", "refused")
        assert again.body["message"].startswith("tokenUsed: ")
        assert matched()  # the real worker keeps its host

        # Decommission: the controller refuses the host, the role is dropped, SIGHUP.
        state_after = orch.link.decommission_host(
            "sim", orch.leases.gate("sim"), instance_id=instance_id, reason="test"
        )
        assert state_after == "decommissioned"
        # The controller tells the worker to stop (workerStop): it exits with status 3 and, while the
        # role is still configured, the node manager only retries at its longest backoff.
        wait_for(
            "the worker to leave",
            lambda: read_state(state).get("last_exit") == 3 and read_state(state).get("restart_pending") is True,
        )
        config.write_text(json.dumps(node_config(controller, [], host, instance_id)))
        os.kill(nm.pid, signal.SIGHUP)
        wait_for(
            "the worker to stop",
            lambda: read_state(state).get("worker_pid") is None and read_state(state).get("roles") == [],
        )
        restarts = read_state(state)["restarts"]
        time.sleep(1.5)  # several reload and supervision cycles: still stopped, not restarted
        after = read_state(state)
        assert after["worker_pid"] is None and after["restarts"] == restarts
        assert nm.poll() is None
        states = {h.state for h in orch.link.host_status(provider="sim") if h.instance_id == instance_id}
        assert states <= {"decommissioned"}
    finally:
        if nm.poll() is None:
            nm.terminate()
            try:
                nm.wait(15)
            except subprocess.TimeoutExpired:
                nm.kill()
                nm.wait()
        nm_log.close()
        orch.close()
    assert nm.returncode == 0
    assert not pidfile.exists()
