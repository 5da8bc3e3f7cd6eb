"""``xceprov daemon`` on a real simulated world: leases, a demand push → a create, SIGTERM, SIGHUP.

The world is the product's own (``xceprov sim up --only controller``: the simulated controller and
cloud behind real Terraform; no hosts, so bootstraps fail and are retried much later, which is
none of these tests' business). The daemon runs as an operator runs it, a child process with the
world's configuration; the test reads only what an operator can: its log, its status file,
``xceprov status``, the metrics endpoint, the cloud and the controller's facts.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sim_world_helpers import SimWorld, agree, sim_world, wait_until

from orchestrator import durable
from orchestrator.model.facts import FactKind
from orchestrator.ops.openops import open_ops
from orchestrator.sim import pki
from orchestrator.sim.controller import admin
from tests.monitoring_helpers import unexposed

pytestmark = pytest.mark.integration

STOP_TIMEOUT = 30.0  # the fence closes 10 s before (a third of it): time for Terraform to park


def configure(world: SimWorld, **daemon: Any) -> dict[str, Any]:
    """The world's configuration with the daemon's test settings; written back, returned."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": f"{STOP_TIMEOUT:g}s", **daemon}
    # No hosts in this world: the key scan gives up after timeout/2, and a failed bootstrap is
    # tried again only after 10 minutes (nothing is returned while a test runs).
    cfg["ansible"] = {"timeout": "4s"}
    cfg["policy"] = {"cooldown": "1s", "retry": {"base": "600s", "max": "600s"}}
    # Nor past their join_deadline: the hosts of one test are still expected in the next.
    cfg["providers"]["sim"]["join_deadline"] = "30m"
    path.write_text(yaml.safe_dump(cfg))
    return cfg


class Daemon:
    """One ``xceprov daemon`` process; its combined output goes to a file (a pipe could fill up)."""

    def __init__(self, world: SimWorld, name: str, env: dict[str, str] | None = None) -> None:
        self.world = world
        self.log_path = world.site / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "daemon"],
            cwd=world.site,
            env={**world.env(), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def status(self) -> dict[str, Any]:
        path = self.world.state / "daemon" / "status.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_status(self, what: str, check: Any, timeout: float = 60.0) -> dict[str, Any]:
        """The status document once ``check(doc)`` holds (the daemon must stay up meanwhile)."""
        found: dict[str, Any] = {}

        def ready() -> bool:
            assert self.alive(), f"the daemon exited ({self.proc.returncode}):\n{self.log()}"
            found.update(self.status())
            return bool(found) and bool(check(found))

        try:
            wait_until(what, ready, timeout=timeout, every=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- the daemon's log ---\n{self.log()[-6000:]}") from None
        return found

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; the exit status and how long the daemon took to exit."""
        began = time.monotonic()
        os.kill(self.pid, signal.SIGTERM)
        code = self.proc.wait(STOP_TIMEOUT + 30)
        self._log.close()
        return code, time.monotonic() - began

    def kill(self) -> None:
        """Whatever happened: nothing of the daemon outlives the test."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT + 10)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@contextlib.contextmanager
def running_daemon(world: SimWorld, name: str, env: dict[str, str] | None = None) -> Iterator[Daemon]:
    daemon = Daemon(world, name, env)
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.fixture(scope="module")
def shared_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    """One world for the tests that do not count instances exactly (each runs its own daemon)."""
    with sim_world(tmp_path_factory.mktemp("daemon-world"), f"dmn-{secrets.token_hex(3)}") as w:
        yield w


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    with sim_world(tmp_path / "site", f"dmn-{secrets.token_hex(3)}") as w:
        yield w


def leased(doc: dict[str, Any]) -> bool:
    return any(row["provider"] == "sim" and row["held"] for row in doc.get("leases", []))


def scrape_text(log: str) -> str:
    """The daemon's metrics as a scraper gets them (the address is the one its log names)."""
    [(host, port)] = re.findall(r"metrics served on http://([\d.]+):(\d+)/metrics", log)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def scrape(log: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = scrape_text(log)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class NotifySocket:
    """systemd's notification socket as the daemon sees it under a Type=notify unit: every
    datagram is read at once (as systemd does) and kept in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.got: list[dict[str, str]] = []
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._done.is_set():
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.got.append(dict(line.split("=", 1) for line in data.split("\n")))

    def first_with(self, key: str, timeout: float = 60.0) -> dict[str, str]:
        """The first datagram that has ``key``."""
        wait_until(f"{key} from the daemon", lambda: any(key in g for g in self.got), timeout=timeout)
        return next(g for g in self.got if key in g)

    def close(self) -> None:
        self._done.set()
        self._reader.join(5)
        self.sock.close()


def test_leases_then_a_demand_push_creates_the_hosts_and_a_stop_releases(shared_world: SimWorld) -> None:
    world = shared_world
    configure(world, metrics={"listen": "127.0.0.1:0"})
    notify = NotifySocket(world.site / "notify")
    systemd = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "2000000"}
    with running_daemon(world, "daemon", systemd) as daemon, contextlib.closing(notify):
        # READY=1 comes after the first pass (its status is written by then); the watchdog is fed.
        ready = notify.first_with("READY")
        assert ready["READY"] == "1" and ready["STATUS"].startswith("first pass done")
        assert daemon.status()["daemon"]["passes"] >= 1
        assert notify.first_with("WATCHDOG")["WATCHDOG"] == "1"
        doc = daemon.wait_status("the daemon's lease of sim", leased)
        assert doc["daemon"]["instance_id"].startswith(f"{world.cluster}-daemon-")
        assert doc["daemon"]["state"] == "running" and doc["last_pass"]["leased"] == ["sim"]
        # Nothing wanted yet: the first pass created nothing.
        assert world.alive() == {} and doc["last_pass"]["ops"] == []
        status = world.ok("status")
        [lease] = doc["leases"]
        # The controller names the holder by its certificate; the epoch is the daemon's.
        assert re.search(r"\n  sim\s+holder \S+  epoch " + re.escape(lease["epoch"]), status), status
        assert re.search(r"leases held by the daemon \(as of \d+s ago\)\n  sim\s+held  epoch", status), status

        world.ok("sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "600s")
        wait_until("the daemon's two hosts in the cloud", lambda: len(world.alive()) == 2, timeout=90)
        wait_until("the op's end", lambda: "op-created" in world.actions(daemon.pid), timeout=60)
        assert open_ops(world.facts()) == []
        created = [e for e in world.audit(daemon.pid) if e["action"] == "op-created"]
        assert len(created) == 1 and len(created[0]["instances"]) == 2
        scale_out = [e for e in world.audit(daemon.pid) if e["action"] == "reconcile-scale-out" and e["ops"]]
        assert scale_out and scale_out[0]["ops"] == [{"provider": "sim", "count": 2, "placements": [["c8.large", 2]]}]
        # Why: the journal says it launched (written after the pass), and the controller was told.
        wait_until("the pass's reasons journaled", lambda: (world.state / "reasons.jsonl").exists(), timeout=60)
        history = json.loads(world.ok("explain", "cpu", "--json"))["history"]
        assert [(r["code"], r["provider"], r["count"]) for r in history[0]["reasons"]] == [("launched", "sim", 2)]
        # Told to the controller without a failure (its demand is then met: the next report clears it).
        assert "scale-out reasons not reported" not in daemon.log()
        told = json.loads(world.ok("sim", "controller", "status", "--json"))["reasons"]
        assert [r["code"] for r in told] in ([], ["launched"]), told
        doc = daemon.wait_status("the status after the create", lambda d: sum(d["instances"]["sim"].values()) == 2)
        assert doc["open_ops"] == [] and doc["instances"]["sim"] == {"expected": 2}
        # This world has no hosts: both bootstraps fail (no host key), and the status says so.
        doc = daemon.wait_status("both bootstraps failed", lambda d: d["bootstrap"]["sim"]["failed"] == 2)
        assert doc["bootstrap"] == {"sim": {"waiting": 0, "running": 0, "done": 0, "failed": 2}}
        status = world.ok("status")
        assert re.search(r"\n  sim\s+waiting 0  running 0  done 0  failed 2\n", status), status
        assert json.loads(world.ok("status", "--json"))["daemon"]["bootstrap"]["sim"]["failed"] == 2

        got = scrape(daemon.log())
        assert got[("xceprov_lease_valid", (("provider", "sim"),))] == 1
        assert got[("xceprov_lease_remaining_seconds", (("provider", "sim"),))] > 0
        assert got[("xceprov_ops_total", (("kind", "create"), ("outcome", "succeeded"), ("provider", "sim")))] == 1
        assert got[("xceprov_reconcile_pass_duration_seconds_count", ())] >= 3
        assert sum(v for (name, labels), v in got.items() if name == "xceprov_instances") == 2
        assert got[("xceprov_bootstrap_hosts", (("provider", "sim"), ("state", "failed")))] == 2
        assert got[("xceprov_bootstrap_hosts", (("provider", "sim"), ("state", "waiting")))] == 0

        code, _took = daemon.terminate()
        assert code == 0, daemon.log()
        assert notify.first_with("STOPPING")["STOPPING"] == "1"
    assert daemon.status()["daemon"]["state"] == "stopped"
    assert "stopped: no work in flight" in daemon.log()
    # Released at once: the controller names no holder, and `xceprov status` says no daemon runs.
    status = world.ok("status")
    assert re.search(r"\n  sim\s+free", status), status
    assert "no daemon (stopped; its last status was written" in status
    assert set(agree(world)) == set(world.alive())
    # The flight recorder (docs/recording.md): the push, the decision, the op's and the hosts' timings.
    summary = json.loads(world.ok("record", "export", "-o", str(world.site / "run.jsonl.gz"), "--json-summary"))
    counts = summary["counts"]
    assert counts["config"] >= 1 and counts["demand"] >= 1 and counts["decision"] >= 1, summary
    assert counts["op"] >= 3 and counts["host"] >= 2 and summary["templates"] == ["cpu"], summary
    assert json.loads(world.ok("record", "show", str(world.site / "run.jsonl.gz"), "--json")) == summary


def test_sigterm_mid_burst_parks_then_a_restart_completes_with_no_duplicate(world: SimWorld) -> None:
    cfg = configure(world)
    cfg["terraform"] = {"parallelism": 1}  # one create at a time: the burst is long and observable
    (world.site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
    # Eight creates of 5 s one after the other: the fence closes 20 s after the SIGTERM, mid-burst.
    world.store.set_slow_launch(5.0)
    with running_daemon(world, "daemon-1") as first:
        first.wait_status("the daemon's lease of sim", leased)
        world.ok("sim", "submit", "--template", "cpu", "--hosts", "8", "--duration", "600s")
        wait_until("the burst under way", lambda: len(world.alive()) >= 1 or not first.alive(), timeout=120)
        code, took = first.terminate()
        # Within the bound, exit 0: the apply was interrupted gracefully and its op parked.
        assert code == 0, first.log()
        assert took < STOP_TIMEOUT + 5, took
    log = first.log()
    assert "SIGTERM: stopping: no new op" in log and "stopped: no work in flight" in log
    parked = open_ops(world.facts())
    assert len(parked) == 1 and parked[0].kind == "create" and parked[0].count == 8, parked
    assert len(world.alive()) < 8, "the SIGTERM came too late to interrupt the burst"
    assert "op-apply-interrupted" in world.actions(first.pid)

    world.store.set_slow_launch(0.0)
    with running_daemon(world, "daemon-2") as second:
        wait_until("the parked op resumed", lambda: open_ops(world.facts()) == [] or not second.alive(), timeout=120)
        second.wait_status(
            "the status after the resume", lambda d: d["open_ops"] == [] and d["instances"]["sim"] == {"expected": 8}
        )
        # The restarted daemon finished the parked op instead of asking for eight more.
        resumed = [e for e in world.audit(second.pid) if e["action"] == "resume"]
        assert [(e["op"], e["outcome"]) for e in resumed] == [(parked[0].op_id, "completed")]
        assert [e["op"] for e in world.audit(second.pid) if e["action"] == "op-created"] == [parked[0].op_id]
        code, _took = second.terminate()
        assert code == 0, second.log()
    alive = agree(world)
    assert len(alive) == 8 and {i.tags.get("xce:op_id") for i in alive.values()} == {parked[0].op_id}


def test_sighup_with_a_broken_configuration_keeps_the_old_one(shared_world: SimWorld) -> None:
    world = shared_world
    cfg = configure(world)
    path = world.site / "xceprov.yaml"
    with running_daemon(world, "daemon") as daemon:
        daemon.wait_status("the daemon's first pass", leased)
        broken = {**cfg, "daemon": {**cfg["daemon"], "reconcile_intervall": "5s"}}
        path.write_text(yaml.safe_dump(broken))
        os.kill(daemon.pid, signal.SIGHUP)
        wait_until("the refused reload in the log", lambda: "configuration not reloaded" in daemon.log(), timeout=30)
        passes = daemon.status()["daemon"]["passes"]
        doc = daemon.wait_status("passes after the refused reload", lambda d: d["daemon"]["passes"] >= passes + 2)
        assert doc["daemon"]["reconcile_interval"] == 2.0  # the last good configuration is in force
        refused = [line for line in daemon.log().splitlines() if "configuration not reloaded" in line]
        assert len(refused) == 1, refused
        assert refused[0].endswith(
            f"SIGHUP: configuration not reloaded, keeping the last good one: {path}: "
            "daemon.reconcile_intervall: unknown key (did you mean 'reconcile_interval'?)"
        ), refused[0]

        # A good one is taken from the next pass on.
        path.write_text(yaml.safe_dump({**cfg, "daemon": {**cfg["daemon"], "reconcile_interval": "3s"}}))
        os.kill(daemon.pid, signal.SIGHUP)
        daemon.wait_status("the reloaded interval", lambda d: d["daemon"]["reconcile_interval"] == 3.0)
        assert f"SIGHUP: configuration reloaded from {path}" in daemon.log()
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()


def test_sighup_keeps_cluster_and_state_dir_until_the_next_start_and_applies_the_rest(shared_world: SimWorld) -> None:
    world = shared_world
    cfg = configure(world)
    path = world.site / "xceprov.yaml"
    elsewhere = world.site / "elsewhere"
    try:
        with running_daemon(world, "daemon-restart-only") as daemon:
            first = daemon.wait_status("the daemon's first pass", leased)
            changed = {
                **cfg,
                "cluster": f"{world.cluster}-renamed",
                "state_dir": str(elsewhere),
                "daemon": {**cfg["daemon"], "reconcile_interval": "3s"},
            }
            path.write_text(yaml.safe_dump(changed))
            os.kill(daemon.pid, signal.SIGHUP)
            # The reloadable key is in force: the status file (still under the old state_dir) says so.
            doc = daemon.wait_status("the reloaded interval", lambda d: d["daemon"]["reconcile_interval"] == 3.0)
            passes = doc["daemon"]["passes"]
            doc = daemon.wait_status("passes after the reload", lambda d: d["daemon"]["passes"] >= passes + 2)
            assert leased(doc) and doc["daemon"]["instance_id"] == first["daemon"]["instance_id"]
            assert not elsewhere.exists()
            tail = "it takes effect at the next start; the daemon keeps"
            kept = [line for line in daemon.log().splitlines() if tail in line]
            assert len(kept) == 2, kept
            assert kept[0].endswith(f"SIGHUP: cluster changed in {path}: {tail} '{world.cluster}'"), kept
            assert kept[1].endswith(f"SIGHUP: state_dir changed in {path}: {tail} '{world.state}'"), kept
            assert f"SIGHUP: configuration reloaded from {path}" in daemon.log()
            code, _took = daemon.terminate()
            assert code == 0, daemon.log()
        assert not elsewhere.exists()
    finally:
        path.write_text(yaml.safe_dump(cfg))  # the next tests of the shared world start from it


def test_the_daemon_scans_for_orphans_on_its_interval_and_reports_a_stray(world: SimWorld) -> None:
    cfg = configure(world, metrics={"listen": "127.0.0.1:0"})
    # A short scan interval; no settle window (the world's controller started moments ago).
    cfg["policy"]["orphans"] = {"interval": "3s", "settle_window": "0s"}
    (world.site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
    with running_daemon(world, "daemon") as daemon:
        first = daemon.wait_status(
            "the daemon's first orphan scan", lambda d: leased(d) and (d.get("orphans") or {}).get("last_scan")
        )
        assert first["orphans"]["interval"] == 3.0
        assert first["orphans"]["last_scan"]["ok"], first["orphans"]
        # An object tagged with this cluster that no fact names: class (b), made behind the daemon's back.
        ours = (f"--tag=xce:cluster={world.cluster}", "--tag=xce:provider=sim")
        made = world.ok(
            "sim", "fault", "create", "--flavor", "c8.large", "--image", "debian-12", "--name", "stray", *ours
        )
        stray = made.split()[0]
        made_at = time.time()

        def found(doc: dict[str, Any]) -> bool:
            last = (doc.get("orphans") or {}).get("last_scan") or {}
            return last.get("started", 0) > made_at and any(f["object_id"] == stray for f in last.get("listed", []))

        doc = daemon.wait_status("the stray in the daemon's orphan summary", found, timeout=180)
        last = doc["orphans"]["last_scan"]
        assert last["trigger"] == "interval" and last["act"] is True and last["findings"]["b"] == 1
        [finding] = [f for f in last["listed"] if f["object_id"] == stray]
        # Reported, not acted on (policy.orphans.action: report): an orphanReported fact, the object lives.
        assert (finding["class"], finding["action"], finding["outcome"]) == ("b", "report", "reported")
        # The scan that committed the fact, or a later one (under load the status file may be read
        # only after the next scan, which finds the fact there): either way the fact exists once.
        assert finding["reason"] in {
            "orphanReported fact committed",
            "reported before (orphanReported fact at the controller)",
        }, finding
        assert world.store.get(stray).state == "running"  # type: ignore[union-attr]
        assert [f.instance_id for f in world.facts() if f.kind == "orphanReported"] == [stray]
        detected = [e for e in world.audit(daemon.pid) if e["action"] == "orphan-detected"]
        assert stray in {e["finding"]["object_id"] for e in detected}
        # `xceprov status` has one line for it; the metrics count it.
        status = world.ok("status")
        line = r"\n  orphans: last scan \(interval\) \d+s ago: 1 finding \(b\) 1: reported 1;"
        assert re.search(line, status), status
        got = scrape(daemon.log())
        assert got[("xceprov_orphan_findings", (("class", "b"), ("provider", "sim")))] == 1
        reported = (("action", "report"), ("outcome", "reported"), ("provider", "sim"))
        assert got[("xceprov_orphan_actions_total", reported)] >= 1
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()
    # Later scans of the daemon reported it again (the fact only once), and nothing ended it.
    assert world.store.get(stray).state == "running"  # type: ignore[union-attr]


def test_join_tokens_left_by_a_dead_run_go_when_the_daemon_starts(shared_world: SimWorld) -> None:
    world = shared_world
    configure(world)
    parent = world.state / "ansible"
    parent.mkdir(parents=True, exist_ok=True)
    dead = durable.OwnedDir(parent, "join-tokens-")  # as a killed run leaves it: nobody holds the lock
    (dead.path / "tokens.json").write_text('{"h": "secret"}')
    os.close(dead.lock_fd)
    live = durable.OwnedDir(parent, "join-tokens-")  # a run still going (this process)
    try:
        with running_daemon(world, "daemon-tokens") as daemon:
            daemon.wait_status("the daemon's first pass", leased)
            assert not dead.path.exists()
            assert live.path.exists()
            code, _took = daemon.terminate()
            assert code == 0, daemon.log()
    finally:
        live.close()


def test_a_second_daemon_on_the_same_state_dir_is_refused_in_one_line(shared_world: SimWorld) -> None:
    """Issue 27 item 8: both ran, each taking the other's join tokens for a dead run's."""
    world = shared_world
    configure(world)
    with running_daemon(world, "daemon-first") as first:
        first.wait_status("the first daemon's lease of sim", leased)
        second = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "daemon"],
            cwd=world.site,
            env=world.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second.returncode == 9, second.stderr
        [line] = second.stderr.splitlines()
        assert f"another xceprov daemon (process {first.pid}) runs on it; stop that one first" in line
        assert first.alive(), first.log()
        code, _took = first.terminate()
        assert code == 0, first.log()


def test_verbs_beside_a_running_daemon_are_refused_and_never_take_or_release_its_lease(world: SimWorld) -> None:
    cfg = configure(world)
    cfg["terraform"] = {"parallelism": 1}  # one create at a time: the burst is long and observable
    (world.site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
    bundle = world.bundle("one.bundle", "cpu=1")  # planned before the daemon: a bundle apply would carry out
    world.store.set_slow_launch(4.0)
    with running_daemon(world, "daemon") as daemon:
        daemon.wait_status("the daemon's lease of sim", leased)
        world.ok("sim", "submit", "--template", "cpu", "--hosts", "6", "--duration", "600s")
        wait_until("the burst under way", lambda: "op-apply" in world.actions(daemon.pid) or not daemon.alive())
        before = admin.status(world.sim)
        [held] = [x for x in before["leases"] if x["provider"] == "sim"]
        assert held["holder"].split("/")[1].startswith(f"{world.cluster}-daemon-"), held

        # The listing reads facts and state: no lease, exit 0, the daemon's op shown open.
        listed = world.xceprov("ops", "--json")
        assert listed.returncode == 0, listed.stderr
        [sim] = json.loads(listed.stdout)["providers"]
        [burst] = sim["open"]
        assert burst["kind"] == "create" and burst["count"] == 6
        for verb in (["destroy", "--all"], ["apply", str(bundle)], ["return", burst["pending"][0]], ["ops", "resume"]):
            done = world.xceprov(*verb)
            assert done.returncode == 9, f"xceprov {' '.join(verb)}: exit {done.returncode}\n{done.stderr}"
            [line] = done.stderr.splitlines()
            assert f"provider sim: the lease is held by {held['holder']} (let the daemon do the work, " in line, line

        # The daemon kept its lease and epoch all along (no new term, no new seq) ...
        after = admin.status(world.sim)
        assert after["term"] == before["term"]
        assert [(x["holder"], x["epoch"]) for x in after["leases"] if x["provider"] == "sim"] == [
            (held["holder"], held["epoch"])
        ]
        # ... and finishes its op: six instances, each created once, none returned.
        wait_until("the daemon's op done", lambda: open_ops(world.facts()) == [] or not daemon.alive(), timeout=180)
        assert daemon.alive(), daemon.log()
        log = daemon.log()
        assert "lost to" not in log and "revoked" not in log, log[-3000:]
    facts = world.facts()
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED]
    assert len(created) == 6 and len(set(created)) == 6
    assert [f for f in facts if f.kind in (FactKind.RETURNED, FactKind.RETURNING)] == []
    alive = agree(world)
    assert len(alive) == 6 and {i.tags.get("xce:op_id") for i in alive.values()} == {burst["op_id"]}


def template_row(got: dict[tuple[str, tuple[tuple[str, str], ...]], float], template: str) -> tuple[float, ...]:
    """``(demand, in flight, gap)`` of ``template`` in a scrape."""
    labels = (("template", template),)
    return tuple(got[(f"xceprov_template_{name}", labels)] for name in ("demand", "in_flight", "gap"))


def test_an_operator_s_scrape_has_every_series_the_shipped_dashboard_and_alerts_read(world: SimWorld) -> None:
    cfg = configure(world, metrics={"listen": "127.0.0.1:0"})
    cfg["providers"]["sim"]["budget_per_hour"] = 50.0
    cfg["policy"]["budget_per_hour"] = 80.0
    path = world.site / "xceprov.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with running_daemon(world, "daemon") as daemon:
        daemon.wait_status("the daemon's lease of sim", leased)
        text = scrape_text(daemon.log())
        got = scrape(daemon.log())
        assert got[("xceprov_build_info", (("version", importlib.metadata.version("xce-provisioner")),))] == 1
        assert got[("xceprov_controller_link_up", ())] == 1
        assert got[("process_resident_memory_bytes", ())] > 0 and got[("process_start_time_seconds", ())] > 0
        assert got[("xceprov_config_last_reload_successful", ())] == 1  # the configuration of the start
        started = got[("xceprov_config_last_reload_timestamp_seconds", ())]
        assert started > 0
        # Every phase has its failure counter from the first pass on (rate() sees the first failure).
        for phase in ("read", "resume", "scale-out", "bootstrap", "join-tracking", "reclaim"):
            assert ("xceprov_reconcile_phase_failures_total", (("phase", phase),)) in got
        assert got[("xceprov_reconcile_phase_failures_total", (("phase", "read"),))] == 0
        assert "_created" not in text
        # Nothing wanted yet: every configured template reads 0.
        assert template_row(got, "cpu") == template_row(got, "gpu") == (0, 0, 0)
        # A provider with no instance has its instance series (0), its cost per template (0),
        # its budget, the cluster's, and the interval the "not passing" alert reads.
        assert got[("xceprov_instances", (("provider", "sim"), ("state", "idle")))] == 0
        assert got[("xceprov_cost_per_hour", (("provider", "sim"), ("template", "cpu")))] == 0
        assert got[("xceprov_provider_budget_per_hour", (("provider", "sim"),))] == 50
        assert got[("xceprov_cluster_budget_per_hour", (("cluster", world.cluster),))] == 80
        assert got[("xceprov_reconcile_interval_seconds", ())] == 2
        assert got[("xceprov_provider_backoff", (("provider", "sim"), ("template", "*")))] == 0

        # A job that wants two hosts: demand 2; once created they are on their way and the gap is 0.
        world.ok("sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "600s")
        wait_until(
            "the two hosts on their way in the metrics", lambda: template_row(scrape(daemon.log()), "cpu") == (2, 2, 0)
        )
        got = scrape(daemon.log())
        assert template_row(got, "gpu") == (0, 0, 0)
        # What runs costs 2 x cpu's cost_per_hour on sim; the create op's duration is observed.
        assert got[("xceprov_cost_per_hour", (("provider", "sim"), ("template", "cpu")))] == pytest.approx(0.68)
        create = (("kind", "create"), ("outcome", "succeeded"), ("provider", "sim"))
        assert got[("xceprov_op_duration_seconds_count", create)] >= 1
        # Every metric a query of contrib/grafana's dashboard or contrib/prometheus's alert rules
        # names is exposed (Prometheus's own `up` aside).
        assert unexposed(scrape_text(daemon.log())) == []

        # SIGHUP with a broken file: refused, the metric says so; a good one: taken, and later.
        path.write_text(yaml.safe_dump({**cfg, "daemon": {**cfg["daemon"], "reconcile_intervall": "5s"}}))
        os.kill(daemon.pid, signal.SIGHUP)
        wait_until(
            "the refused reload", lambda: scrape(daemon.log())[("xceprov_config_last_reload_successful", ())] == 0
        )
        refused = scrape(daemon.log())[("xceprov_config_last_reload_timestamp_seconds", ())]
        assert refused > started
        path.write_text(yaml.safe_dump({**cfg, "daemon": {**cfg["daemon"], "reconcile_interval": "3s"}}))
        os.kill(daemon.pid, signal.SIGHUP)
        wait_until("the taken reload", lambda: scrape(daemon.log())[("xceprov_config_last_reload_successful", ())] == 1)
        assert scrape(daemon.log())[("xceprov_config_last_reload_timestamp_seconds", ())] > refused
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()


def test_a_daemon_serving_tls_with_client_certificates_scrapes_clean_in_promtool(
    shared_world: SimWorld, tmp_path: Path
) -> None:
    world = shared_world
    authority = pki.make_ca("scrapers CA")
    authority.write(tmp_path / "ca.pem", tmp_path / "ca.key")
    pki.issue_cert(authority, "metrics", ["127.0.0.1"]).write(tmp_path / "metrics.pem", tmp_path / "metrics.key")
    pki.issue_cert(authority, "prometheus", client=True).write(tmp_path / "scraper.pem", tmp_path / "scraper.key")
    tls = {
        "tls_cert": str(tmp_path / "metrics.pem"),
        "tls_key": str(tmp_path / "metrics.key"),
        "tls_client_ca": str(tmp_path / "ca.pem"),
    }
    configure(world, metrics={"listen": "127.0.0.1:0", **tls})
    # Its stderr is the journal stream systemd would name (the file keeps its inode when reopened).
    (world.site / "daemon-tls.log").touch()
    st = os.stat(world.site / "daemon-tls.log")
    with running_daemon(world, "daemon-tls", env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}) as daemon:
        daemon.wait_status("the daemon's lease of sim", leased)
        # Every line carries its priority for journald: INFO is <6>.
        served = [line for line in daemon.log().splitlines() if "metrics served on https://" in line]
        assert len(served) == 1 and served[0].startswith("<6>"), daemon.log()
        [(host, port)] = re.findall(r"metrics served on https://([\d.]+):(\d+)/metrics", daemon.log())
        url = f"https://{host}:{port}/metrics"
        scraper = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        scraper.load_cert_chain(tmp_path / "scraper.pem", tmp_path / "scraper.key")
        with urllib.request.urlopen(url, timeout=10, context=scraper) as reply:
            text = reply.read().decode()
        assert "xceprov_controller_link_up 1.0" in text
        # A scraper without a certificate is refused in the handshake: it sees no metric.
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            urllib.request.urlopen(url, timeout=10, context=anonymous).close()
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (Debian: apt-get install prometheus; scripts/setup-env.sh does it as root)"
        )
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    # Clean: exit 0 and no lint finding (promtool names each: "xceprov_...: counter metrics should have ...").
    assert checked.returncode == 0 and checked.stdout.strip() == checked.stderr.strip() == "", checked
