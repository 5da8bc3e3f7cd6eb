"""The orphan scan against real Terraform, the simulated cloud (its faults) and a simulated controller process.

Each class is produced the way it happens: (a) a host whose worker never joins, (b) an object
launched out of band with this cluster's tags (``xceprov sim fault create``), (c) an instance
deleted behind Terraform's back (``xceprov sim fault delete``). Objects of another cluster and
untagged ones are never reported nor touched; the protect tag holds; an unreadable cloud
(``fault error-rate 1``) or an unreachable controller produces no action; a scan right after a
controller restart returns no live worker; ``xceprov orphans`` changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cli_run
import pytest
from sim_controller_helpers import client_cert, connect, free_port, join_worker, wait_for, worker_token

from orchestrator.configfile import load_config
from orchestrator.model.facts import FactKind
from orchestrator.ops.executor import Created, Executor
from orchestrator.ops.facts import LinkFacts
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.services.ops import fenced_session
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "orph"
FAULT_CREATE = ("sim", "fault", "create", "--flavor", "c8.large", "--image", "debian-12")
OURS = (f"--tag=xce:cluster={CLUSTER}", "--tag=xce:provider=sim")


class Controller:
    """A simulated controller process that can be restarted on the same address and state."""

    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "ctl"
        self.address = f"127.0.0.1:{free_port()}"
        self.log = tmp_path / "controller.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "orchestrator.sim.controller", "serve", "--state-dir", str(self.state)]
        command += ["--listen", self.address, "--ttl", "4", "--check-interval", "0.5", "--heartbeat", "600"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        host, port = self.address.rsplit(":", 1)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                connect((host, int(port)), self.state / "tls" / "ca.pem", timeout=0.5).close()
            except OSError:
                return False
            return admin.admin_socket(self.state).exists()

        wait_for("the simulated controller", lambda: (self.state / "tls" / "ca.pem").exists() and up())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Site:
    """A site using the controller; the simulated cloud lives in its state directory."""

    path: Path
    ctl: Controller

    @property
    def store(self) -> CloudStore:
        return CloudStore(self.path / "state" / "sim" / "cloud.sqlite")

    def live(self) -> dict[str, str]:
        """Every live object of the cloud, any tags: id → name."""
        return {i.id: i.name for i in self.store.list_instances({})}

    def xceprov(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli_run.xceprov(self.path, *args, timeout=300)

    @contextlib.contextmanager
    def session(self) -> Iterator[tuple[Executor, OrphanScanner]]:
        loaded = load_config(str(self.path / "xceprov.yaml"))
        with fenced_session(loaded, ["sim"], ROOT) as ops:
            facts = ops.parts.facts
            assert isinstance(facts, LinkFacts)
            config = loaded.config
            yield ops.executor, OrphanScanner(config, ops, LinkController(facts.link), time.time, config.state_dir)

    def audit(self) -> list[dict[str, Any]]:
        text = (self.path / "state" / "audit.log").read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_site(path: Path, ctl: Controller, orphans: dict[str, Any]) -> None:
    cert, key = client_cert(ctl.state, "provisioner", "orch")
    path.mkdir()
    config = {
        "cluster": CLUSTER,
        "state_dir": "state",
        "controller": {
            "addresses": [ctl.address],
            "ca": str(ctl.state / "tls" / "ca.pem"),
            "client_cert": str(cert),
            "client_key": str(key),
            "connect_timeout": 2,
            "request_timeout": 5,
            "lease_margin": 0.5,
        },
        "policy": {"orphans": {"breaker_min": 10, **orphans}},
        "providers": {"sim": {"module": "xcesim", "max_instances": 20, "join_deadline": 1}},
        "templates": {
            "cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}},
            "kept": {
                "tags": {"xce:protect": "true"},
                "providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}},
            },
        },
    }
    (path / "xceprov.yaml").write_text(json.dumps(config))


@contextlib.contextmanager
def site_with(tmp_path: Path, **orphans: Any) -> Iterator[Site]:
    ctl = Controller(tmp_path)
    ctl.start()
    try:
        write_site(tmp_path / "site", ctl, orphans)
        yield Site(tmp_path / "site", ctl)
    finally:
        ctl.stop()


@contextlib.contextmanager
def joined(site: Site, made: Created) -> Iterator[None]:
    """The host's worker joined (the connection stays open for the block)."""
    host, port = site.ctl.address.rsplit(":", 1)
    worker = connect((host, int(port)), site.ctl.state / "tls" / "ca.pem")
    try:
        token = worker_token(site.ctl.state, made.key, made.name)
        reply = join_worker(worker, made.name, made.instance_id, token=token, instance_key=made.key)
        assert reply.kind == "joined", reply.body
        yield
    finally:
        worker.close()


def test_each_class_is_found_acted_on_by_policy_and_foreign_objects_are_never_touched(tmp_path: Path) -> None:
    with site_with(tmp_path, settle_window=0) as site:
        with site.session() as (executor, scanner):
            live, silent, ghost = executor.create("sim", "cpu", 3).created
            (kept,) = executor.create("sim", "kept", 1).created  # its template tags it xce:protect
            with joined(site, live):
                theirs = ["--tag=xce:cluster=other", "--tag=xce:provider=sim"]
                for args in (["--name", "stray", *OURS], ["--name", "theirs", *theirs], ["--name", "bare"]):
                    done = site.xceprov(*FAULT_CREATE, *args)
                    assert done.returncode == 0, done.stderr
                assert site.xceprov("sim", "fault", "delete", ghost.instance_id).returncode == 0
                time.sleep(1.2)  # past the 1 s join deadline
                before = site.live()

                # xceprov orphans: the report, from another process, beside the session's leases.
                done = site.xceprov("orphans", "--json")
                assert done.returncode == 0, done.stderr
                doc = json.loads(done.stdout)
                listed = {(f["class"], f["instance_key"] or f["name"]) for f in doc["findings"]}
                assert listed == {("a", silent.key), ("a", kept.key), ("b", "stray"), ("c", ghost.key)}
                assert {f["outcome"] for f in doc["findings"]} == {"would-take", "reported"}
                assert site.live() == before

                report = scanner.scan(act=True)
                outcomes = {(f.cls, f.instance_key or f.name): (f.outcome, f.reason) for f in report.findings}
                assert outcomes[("a", silent.key)][0] == "taken", outcomes
                assert outcomes[("a", kept.key)][0] == "skipped" and "xce:protect" in outcomes[("a", kept.key)][1]
                assert outcomes[("b", "stray")] == ("reported", "orphanReported fact committed")
                assert outcomes[("c", ghost.key)][0] == "taken", outcomes
            facts = scanner.parts.facts.facts("sim")
        kinds = {(f.kind, f.instance_key) for f in facts}
        assert (FactKind.LOST, ghost.key) in kinds and (FactKind.RETURNED, silent.key) in kinds
        assert [f.host_name for f in facts if f.kind == FactKind.ORPHAN_REPORTED] == ["stray"]
        # The joined host, the protected one, the stray (reported only), the other cluster's and
        # the untagged objects remain.
        assert sorted(site.live().values()) == sorted([live.name, kept.name, "stray", "theirs", "bare"])
        assert any(e["action"] == "orphan-action" and e.get("epoch") for e in site.audit())


def test_an_unreadable_cloud_or_an_unreachable_controller_produces_no_action(tmp_path: Path) -> None:
    with site_with(tmp_path, settle_window=0) as site:
        with site.session() as (executor, scanner):
            (silent,) = executor.create("sim", "cpu", 1).created
            time.sleep(1.2)
            assert site.xceprov("sim", "fault", "error-rate", "1.0").returncode == 0
            report = scanner.scan(act=True)
            assert report.providers[0].drift.startswith("unreadable")
            assert [(f.cls, f.outcome) for f in report.findings] == [("a", "skipped")]
            assert "cloud view unread" in report.findings[0].reason
            assert site.xceprov("sim", "fault", "clear").returncode == 0
        site.ctl.stop()
        done = site.xceprov("orphans", "--json")
        assert done.returncode == 11, done.stderr  # not every view read: no all-clear
        doc = json.loads(done.stdout)
        assert doc["controller"]["read"] is False and doc["findings"] == [] and doc["complete"] is False
        assert set(site.live()) == {silent.instance_id}


def test_a_scan_right_after_a_controller_restart_returns_no_live_worker(tmp_path: Path) -> None:
    with site_with(tmp_path, settle_window=0) as site:
        with site.session() as (executor, _scanner):
            live, silent = executor.create("sim", "cpu", 2).created
        with joined(site, live):
            time.sleep(1.2)
            site.ctl.stop()
        site.ctl.start()  # a new term; the worker's connection is gone with the old process
        with site.session() as (_executor, scanner):
            report = scanner.scan(act=True)
        # The joined worker is known as joined (durable) and not back yet: nothing is returned,
        # not even the host that never joined, until every joined worker rejoined or was lost.
        assert [f.instance_key for f in report.findings] == [silent.key]
        assert report.findings[0].outcome == "skipped" and "not yet rejoined" in report.findings[0].reason
        assert set(site.live()) == {live.instance_id, silent.instance_id}


def test_the_administrator_terminates_a_stray_through_import_and_the_return_path(tmp_path: Path) -> None:
    # A provider never used: its first scan lists the cloud all the same.
    with site_with(tmp_path, settle_window=0, grace=0) as site:
        made = site.xceprov(*FAULT_CREATE, "--name", "stray", *OURS)
        assert made.returncode == 0, made.stderr
        stray = made.stdout.split()[0]
        refused = site.xceprov("orphans", "adopt", stray)
        # (The first command of the site may also warn that it tightened the state directory's mode.)
        errors = [line for line in refused.stderr.splitlines() if line.startswith("xceprov: ")]
        assert refused.returncode == 2 and len(errors) == 1 and "matches no live host" in errors[0]
        done = site.xceprov("orphans", "return", stray)
        assert done.returncode == 0, done.stderr
        assert "terminate: taken" in done.stdout
        assert stray not in site.live()
        assert site.store.get(stray).state == "terminated"  # type: ignore[union-attr]
        with site.session() as (_executor, scanner):
            facts = scanner.parts.facts.facts("sim")
        kinds = [(f.kind, f.instance_id) for f in facts if f.kind in (FactKind.RETURNING, FactKind.RETURNED)]
        assert kinds[0] == (FactKind.RETURNING, stray) and [k for k, _ in kinds] == ["returning", "returned"]
        actions = [e["action"] for e in site.audit()]
        assert actions.index("fact-returning") < actions.index("op-import") < actions.index("op-apply")


def test_a_cloud_name_with_control_characters_prints_escaped_on_one_line(tmp_path: Path) -> None:
    """An object launched out of band whose name holds an ESC sequence and a newline: the
    ``xceprov orphans`` table shows its finding on one line with both escaped, and no line of
    the output is forged; the JSON keeps the name as it is (json escapes it)."""
    hostile = "evil\x1b[2J\x1b[1;1H\nforged) sim i-0 all clear"
    with site_with(tmp_path, settle_window=0) as site:
        made = site.xceprov(*FAULT_CREATE, "--name", hostile, *OURS)
        assert made.returncode == 0, made.stderr
        done = site.xceprov("orphans")
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout
        lines = done.stdout.splitlines()
        (finding,) = [line for line in lines if line.startswith("(b) ")]
        assert "evil\\x1b[2J\\x1b[1;1H\\nforged) sim i-0 all clear" in finding
        assert not [line for line in lines if line.startswith("forged")]
        as_json = site.xceprov("orphans", "--json")
        assert [f["name"] for f in json.loads(as_json.stdout)["findings"]] == [hostile]


def test_orphans_return_names_every_guard_dry_runs_and_confirms_only_the_time_guards(tmp_path: Path) -> None:
    """Through the command line: a stray just launched, right after the controller started
    (settle window 300 s, orphan_grace 30 min by default), is refused naming both; one with the
    protect tag names it too; ``--dry-run`` changes nothing; ``--confirm`` waives the time guards
    (audited with the user and uid) but never the protect tag."""
    with site_with(tmp_path) as site:
        made = [
            site.xceprov(*FAULT_CREATE, "--name", name, *OURS, *more)
            for name, more in (("stray", ()), ("kept", ("--tag=xce:protect=true",)))
        ]
        assert all(m.returncode == 0 for m in made), [m.stderr for m in made]
        stray, kept = (m.stdout.split()[0] for m in made)

        def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
            return [line for line in done.stderr.splitlines() if line.startswith("xceprov: ")]

        refused = site.xceprov("orphans", "return", stray)
        assert refused.returncode == 1, refused.stderr
        [line] = errors(refused)
        assert line.startswith(
            f"xceprov: orphans return {stray}: not done: refused by settle_window, orphan_grace: "
        ), line
        assert line.endswith("(--confirm waives settle_window and orphan_grace)"), line
        [line] = errors(site.xceprov("orphans", "return", kept))
        assert "refused by protect, settle_window, orphan_grace: " in line, line

        [line] = errors(site.xceprov("orphans", "return", stray, "--dry-run"))
        assert line.startswith(f"xceprov: orphans return {stray}: not done (dry run): refused by settle_window, "), line
        dry = site.xceprov("orphans", "return", stray, "--dry-run", "--confirm")
        assert dry.returncode == 0, dry.stderr
        assert (
            "terminate: would-take (dry run: nothing changed; --confirm waives settle_window, orphan_grace)"
            in dry.stdout
        )
        assert set(site.live()) == {stray, kept}

        never = site.xceprov("orphans", "return", kept, "--confirm")
        assert never.returncode == 1
        [line] = errors(never)
        assert "refused by protect: " in line and line.endswith("(tags and the protect tag are never waived)"), line

        done = site.xceprov("orphans", "return", stray, "--confirm")
        assert done.returncode == 0, done.stderr
        assert "terminate: taken" in done.stdout
        assert set(site.live()) == {kept}
        waiver = next(e for e in site.audit() if e["action"] == "orphan-guards-waived")
        assert waiver["who"]["uid"] == os.getuid() and waiver["finding"]["object_id"] == stray
        assert [g["guard"] for g in waiver["waived"]] == ["settle_window", "orphan_grace"]
        actions = [e["action"] for e in site.audit()]
        assert actions.index("orphan-guards-waived") < actions.index("fact-returning")
