"""The daemon's loop against a scripted controller: triggers, reload between passes, status, stop.

The reconciler is a recording stand-in (the pass itself is tested in tests/unit/reconcile and on
a real world in tests/integration/test_daemon.py); the leases, the link and the lease keeper's
child process are the real ones, talking TLS to the fake controller of the link's tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.service import Daemon, DaemonOptions, LoopParts
from orchestrator.daemon.systemd import Notifier
from orchestrator.errors import ConfigError, UsageError
from orchestrator.model.config import Config
from orchestrator.ops.executor import Created
from orchestrator.orphans.report import ScanReport
from orchestrator.workspace.recordings import read_period
from tests.unit.clients.controller import hostile
from tests.unit.clients.controller.ctlfake import FakeConn, FakeController, record_joins, wait_for
from tests.unit.daemon.daemon_helpers import NotifySocket, Report


class Recorder:
    """Stands in for the reconciler: what each pass saw."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.config = parts.config
        self.passes: list[tuple[str, float, bool]] = []  # trigger, interval in force, lease valid
        self.reloads: list[Config] = []

    def run_once(self, trigger: str = "interval") -> Report:
        valid = self.parts.ops.parts.fence.valid("sim")
        self.passes.append((trigger, self.config.daemon.reconcile_interval, valid))
        return Report(trigger)

    def reload(self, config: Config) -> None:
        self.reloads.append(config)
        self.config = config


def site(tmp_path: Path, fake: FakeController, ca: Path, interval: str = "60s", extra: str = "") -> LoadedConfig:
    text = f"""
cluster: unit
state_dir: {tmp_path / "state"}
controller: {{addresses: ["{fake.address}"], ca: {ca}, connect_timeout: 2, request_timeout: 2, lease_margin: 0.5}}
daemon: {{reconcile_interval: {interval}, stop_timeout: 5s}}
providers: {{sim: {{module: xcesim}}}}
templates: {{cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}}}
{extra}
"""
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def status(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "state" / "daemon" / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_passes_on_start_push_and_reload_then_a_clean_stop(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    joins = record_joins(fake)
    first = site(tmp_path, fake, ca[0])
    second = site(tmp_path, fake, ca[0], interval="45s")
    next_config = [second]
    lifecycle = Lifecycle(first, lambda: next_config[0])
    made: list[Recorder] = []

    def factory(parts: LoopParts) -> Recorder:
        made.append(Recorder(parts))
        return made[-1]

    options = DaemonOptions(tmp_path, engine=object(), reconciler=factory, orphan_scanner=ScanRecorder())  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    try:
        assert wait_for(lambda: made and made[0].passes, 30)
        recorder = made[0]
        # The first pass ran with the lease held (the start waits for the leases).
        assert recorder.passes[0] == ("start", 60.0, True)
        assert wait_for(lambda: status(tmp_path).get("daemon", {}).get("passes", 0) >= 1, 30), status(tmp_path)
        doc = status(tmp_path)
        assert doc["daemon"]["instance_id"].startswith("unit-daemon-") and doc["daemon"]["state"] == "running"
        assert [(r["provider"], r["held"]) for r in doc["leases"]] == [("sim", True)]

        # A demand push on the daemon's link starts a pass at once (the interval is a minute).
        count = len(recorder.passes)
        for conn in list(joins):  # the keeper's lease-only link drops it; the daemon's takes it
            conn.push("demand", {"seq": 5, "term": 1, "templates": [{"template": "cpu", "wanted": 3}]})
        assert wait_for(lambda: any(p[0] == "demand" for p in recorder.passes[count:]), 30), recorder.passes

        # SIGHUP: the new configuration reaches the reconciler between two passes.
        assert lifecycle.reload()
        # The pass after it is named "reload", or "demand" when a push landed at the same moment
        # (the triggers pending at a pass are folded into it): either way it runs the new config.
        assert wait_for(lambda: any(p[1] == 45.0 for p in recorder.passes), 30), recorder.passes
        assert [c.daemon.reconcile_interval for c in recorder.reloads] == [45.0]
        reload_pass = next(p for p in recorder.passes if p[1] == 45.0)
        assert reload_pass[0] in ("reload", "demand"), recorder.passes
        assert all(p[1] == 60.0 for p in recorder.passes[: recorder.passes.index(reload_pass)])
        assert daemon.ops is not None and daemon.ops.parts.config.daemon.reconcile_interval == 45.0
        assert wait_for(lambda: status(tmp_path)["daemon"]["reconcile_interval"] == 45.0, 30)
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]
    assert "leaseRelease" in fake.seen  # released, not left to lapse
    final = status(tmp_path)
    assert final["daemon"]["state"] == "stopped"
    assert [(r["provider"], r["held"], r["note"]) for r in final["leases"]] == [("sim", False, "released at stop")]
    # The flight recorder (docs/recording.md): the configuration at start and after the reload,
    # the demand pushed.
    recorded = read_period(tmp_path / "state" / "recordings")
    configs = [r.data["settings"]["reconcile_interval"] for r in recorded if r.kind == "config"]
    assert configs == [60.0, 45.0]
    assert any(r.kind == "demand" and r.data["templates"]["cpu"]["wanted"] == 3 for r in recorded)


class DiskFull(Recorder):
    """A reconciler that cannot take a configuration with a 45 s interval (its audit write fails)."""

    def reload(self, config: Config) -> None:
        self.reloads.append(config)
        if config.daemon.reconcile_interval == 45.0:
            raise OSError(28, "No space left on device")
        self.config = config


def test_a_reload_the_loop_cannot_apply_keeps_the_previous_configuration_and_the_daemon_runs(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any], notify_socket: NotifySocket
) -> None:
    first = site(tmp_path, fake, ca[0])
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.env_value})
    lifecycle = Lifecycle(first, lambda: site(tmp_path, fake, ca[0], interval="45s"), notifier)
    made: list[DiskFull] = []

    def factory(parts: LoopParts) -> DiskFull:
        made.append(DiskFull(parts))
        return made[-1]

    options = DaemonOptions(
        tmp_path, engine=object(), reconciler=factory, orphan_scanner=ScanRecorder(), notifier=notifier
    )  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    try:
        assert wait_for(lambda: status(tmp_path).get("daemon", {}).get("passes", 0) >= 1, 30), status(tmp_path)
        recorder = made[0]
        while notify_socket.receive().get("READY") != "1":  # the start is over (first pass done)
            pass
        count = len(recorder.passes)
        assert lifecycle.reload()  # loaded and valid: the loop applies it between two passes
        # (The loop's STATUS lines and the first pass's READY=1 may come in between: left out.)
        datagrams = notify_socket.drain()
        sent = [
            {k: v for k, v in d.items() if k != "MONOTONIC_USEC"} for d in datagrams if "RELOADING" in d or "READY" in d
        ]
        assert sent == [{"RELOADING": "1"}, {"READY": "1", "STATUS": f"configuration reloaded from {first.source}"}]
        # The loop could not apply it: every part is back on the previous configuration ...
        assert wait_for(lambda: len(recorder.reloads) == 2, 30), recorder.reloads
        assert [c.daemon.reconcile_interval for c in recorder.reloads] == [45.0, 60.0]
        assert wait_for(lambda: lifecycle.config is first, 30)
        # ... and the daemon goes on with it: the pass the reload woke runs, the status is written.
        assert wait_for(lambda: len(recorder.passes) > count, 30), recorder.passes
        assert wait_for(lambda: status(tmp_path)["daemon"]["passes"] > count, 30), status(tmp_path)
        assert all(p[1] == 60.0 for p in recorder.passes), recorder.passes
        assert daemon.ops is not None and daemon.ops.parts.config.daemon.reconcile_interval == 60.0
        assert status(tmp_path)["daemon"]["reconcile_interval"] == 60.0 and daemon.lifecycle.stopping is False
        statuses = [d.get("STATUS", "") for d in datagrams + notify_socket.drain()]
        assert "reload failed: OSError; the previous configuration stays" in statuses, statuses
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]


def test_a_denied_lease_is_asked_for_again_and_the_pass_sees_it_gained(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    released = threading.Event()  # until the other orchestrator lets the lease go

    def acquire(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        if not released.is_set():
            return "leaseDeny", {"provider": "sim", "holder": "other-orchestrator", "retryAfterMs": 300}
        return fake.default(member, payload, conn)

    fake.handlers["leaseAcquire"] = acquire
    loaded = site(tmp_path, fake, ca[0])
    lifecycle = Lifecycle(loaded, lambda: loaded)
    made: list[Recorder] = []

    def factory(parts: LoopParts) -> Recorder:
        made.append(Recorder(parts))
        return made[-1]

    options = DaemonOptions(tmp_path, engine=object(), reconciler=factory, orphan_scanner=ScanRecorder())  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        assert wait_for(lambda: made and made[0].passes, 30)
        # The first pass ran without the lease (another holds it) and the status names the holder.
        assert made[0].passes[0] == ("start", 60.0, False)
        assert wait_for(lambda: bool(status(tmp_path)), 30)
        assert status(tmp_path)["leases"][0]["note"] == "other-orchestrator"
        denied = fake.seen.count("leaseAcquire")
        assert wait_for(lambda: fake.seen.count("leaseAcquire") > denied, 30)  # asked again and again
        released.set()
        # Granted at last: a pass starts without waiting for the interval, with the lease valid.
        assert wait_for(lambda: any(p[0] == "lease" and p[2] for p in made[0].passes), 20)
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)


def test_standalone_is_refused_naming_the_file(tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]) -> None:
    loaded = site(tmp_path, fake, ca[0], extra="standalone: true")
    with pytest.raises(UsageError, match=r"xceprov.yaml: standalone: true: the daemon follows the controller"):
        Daemon(Lifecycle(loaded, lambda: loaded), DaemonOptions(tmp_path))


def test_a_local_state_left_behind_under_backend_pg_stops_the_start(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    shard = tmp_path / "state" / "work" / "unit" / "sim" / "shards" / "1"
    shard.mkdir(parents=True)
    (shard / "terraform.tfstate").write_text('{"version": 4, "serial": 2}')
    loaded = site(tmp_path, fake, ca[0], extra="terraform: {backend: pg}")
    with pytest.raises(ConfigError, match=r"shards/1/terraform\.tfstate .*run xceprov terraform migrate-state"):
        Daemon(Lifecycle(loaded, lambda: loaded), DaemonOptions(tmp_path))


def test_a_pass_that_ignores_the_stop_exits_1_at_the_bound_with_the_leases_released(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    config = tmp_path / "xceprov.yaml"
    config.write_text(
        f"""
cluster: unit
state_dir: {tmp_path / "state"}
controller: {{addresses: ["{fake.address}"], ca: {ca[0]}, connect_timeout: 2, request_timeout: 2, lease_margin: 0.5}}
daemon: {{reconcile_interval: 60s, stop_timeout: 2s}}
providers: {{sim: {{module: xcesim}}}}
templates: {{cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}}}
"""
    )
    child = Path(__file__).with_name("service_child.py")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, str(child), str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "pass start started\n"
        proc.send_signal(signal.SIGTERM)  # the pass never ends: only the bound can end the process
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "stop_timeout 2s passed with work in flight (reconcile pass (start)): exiting anyway" in err
    assert "leaseRelease" in fake.seen
    assert status(tmp_path)["daemon"]["state"] == "stopped"


class ScanRecorder:
    """Stands in for the orphan scanner: the thread and configuration of each scan."""

    def __init__(self) -> None:
        self.scans: list[tuple[bool, threading.Thread, float]] = []

    def __call__(self, parts: LoopParts) -> ScanRecorder:
        self.parts = parts
        return self

    def scan(self, act: bool = False, provider: str | None = None) -> ScanReport:
        self.scans.append((act, threading.current_thread(), self.parts.config.policy.orphans.interval))
        report = ScanReport("unit", time.time(), act=act)
        report.finished = time.time()
        return report


def test_orphan_scans_run_on_the_loop_at_start_and_after_a_failover_s_settle_window(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    loaded = site(tmp_path, fake, ca[0], extra="policy: {orphans: {interval: 1h, settle_window: 2s}}")
    lifecycle = Lifecycle(loaded, lambda: loaded)
    made: list[Recorder] = []
    threads: list[threading.Thread] = []

    def factory(parts: LoopParts) -> Recorder:
        made.append(Recorder(parts))
        return made[-1]

    scanner = ScanRecorder()
    options = DaemonOptions(tmp_path, engine=object(), reconciler=factory, orphan_scanner=scanner)  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    runner = threading.Thread(target=lambda: (threads.append(threading.current_thread()), daemon.run()))
    runner.start()

    def last_scan() -> dict[str, Any]:
        return (status(tmp_path).get("orphans") or {}).get("last_scan") or {}

    try:
        # Right after the first pass, on the loop's own thread (never beside a pass), acting.
        assert wait_for(lambda: last_scan().get("trigger") == "start", 30), status(tmp_path)
        assert scanner.scans[0][:2] == (True, threads[0]) and scanner.scans[0][2] == 3600.0
        assert status(tmp_path)["orphans"]["next_reason"] == "interval"
        # A failover: the controller's term changes and the link reconnects to it. One scan comes
        # once the settle window has passed, long before the hour's interval.
        fake.term = 2
        fake.drop_all()
        assert wait_for(lambda: status(tmp_path)["orphans"].get("term") == 2, 20), status(tmp_path)
        assert wait_for(lambda: last_scan().get("trigger") == "failover", 20), status(tmp_path)
        assert len(scanner.scans) == 2 and scanner.scans[1][1] is threads[0]
        assert status(tmp_path)["orphans"]["failover_scan"] is None
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert status(tmp_path)["orphans"]["last_scan"]["trigger"] == "failover"  # kept in the final status


def test_a_fact_kind_of_a_newer_controller_is_skipped_and_counted_in_the_daemon_s_registry(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    newer = hostile.newer_schema(tmp_path)
    facts = [
        {"kind": "futureKind", "provider": "sim", "opId": "op-1", "epoch": {"term": 1, "seq": 1}, "factId": 8},
        {"kind": "requestIntent", "provider": "sim", "opId": "op-1", "epoch": {"term": 1, "seq": 1}, "factId": 9},
    ]

    def query(_m: str, payload: Any, conn: FakeConn) -> None:
        hostile.send_newer(conn, newer, conn.request_id, "factList", {"provider": payload["provider"], "facts": facts})

    fake.handlers["queryFacts"] = query
    seen: list[list[int]] = []

    class FactRecorder(Recorder):
        def run_once(self, trigger: str = "interval") -> Report:
            assert self.parts.facts is not None
            seen.append([f.fact_id for f in self.parts.facts.facts("sim")])
            return super().run_once(trigger)

    lifecycle = Lifecycle(site(tmp_path, fake, ca[0]), lambda: site(tmp_path, fake, ca[0]))
    options = DaemonOptions(tmp_path, engine=object(), reconciler=FactRecorder, orphan_scanner=ScanRecorder())  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    try:
        assert wait_for(lambda: bool(seen), 30)
        assert seen[0] == [9]  # the known fact is used; the unknown one is left out
        sample = daemon.metrics.registry.get_sample_value(
            "xceprov_controller_unknown_values_total", {"field": "Fact.kind"}
        )
        assert sample is not None and sample >= 1
        assert daemon.link is not None and daemon.link.state().connected and daemon.link.state().reconnects == 0
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]


def test_the_link_up_metric_follows_the_controller_link(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    lifecycle = Lifecycle(site(tmp_path, fake, ca[0]), lambda: site(tmp_path, fake, ca[0]))
    options = DaemonOptions(tmp_path, engine=object(), reconciler=Recorder, orphan_scanner=ScanRecorder())  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    registry = daemon.metrics.registry
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    try:
        assert wait_for(lambda: registry.get_sample_value("xceprov_controller_link_up") == 1, 30)
        fake.close()  # the controller goes away: the link is down at the next scrape
        assert wait_for(lambda: registry.get_sample_value("xceprov_controller_link_up") == 0, 30)
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]


class Bootstrapper(Recorder):
    """A reconciler whose first pass runs the daemon's bootstrap play on one of the op's two
    hosts, then (``batches`` 2) on the other in a second batch."""

    batches = 1

    def run_once(self, trigger: str = "interval") -> Report:
        assert self.parts.bootstrap is not None
        if not self.passes:
            for key in ("op-1-001", "op-1-000")[: self.batches]:
                self.parts.bootstrap("sim", [Created(key, "i-1", f"cpu-{key[-1]}", "10.0.0.1", "cpu", 0.0)])
        return super().run_once(trigger)


class TwoBatches(Bootstrapper):
    batches = 2


def op_facts(fake: FakeController) -> None:
    """The controller's facts of provider sim: op-1, two hosts created."""
    intent = {"kind": "requestIntent", "provider": "sim", "opId": "op-1", "epoch": {"term": 1, "seq": 1}}
    created = [
        {**intent, "kind": "instanceCreated", "factId": 8 + i, "instanceKey": f"op-1-00{i}", "template": "cpu"}
        for i in range(2)
    ]
    facts = [{**intent, "factId": 7, "count": 2, "template": "cpu"}, *created]
    fake.handlers["queryFacts"] = lambda member, payload, conn: ("factList", {"provider": "sim", "facts": facts})


def test_the_status_file_shows_the_hosts_of_a_bootstrap_play_while_it_runs(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    op_facts(fake)
    seen_in_play: list[dict[str, Any]] = []

    def play(provider: str, hosts: Any) -> dict[str, str]:
        seen_in_play.append(status(tmp_path).get("bootstrap", {}))
        return {h.name: "ok" for h in hosts}

    lifecycle = Lifecycle(site(tmp_path, fake, ca[0]), lambda: site(tmp_path, fake, ca[0]))
    options = DaemonOptions(tmp_path, bootstrap=play, engine=object(), reconciler=Bootstrapper)  # type: ignore[arg-type]
    daemon = Daemon(lifecycle, options)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    try:
        assert wait_for(lambda: seen_in_play, 30)
        # Written as the play started: one host in it, the op's other host still waiting.
        assert seen_in_play == [{"sim": {"waiting": 1, "running": 1, "done": 0, "failed": 0}}]
        # After the pass the play is over: nothing runs (the pass's records would say done/failed).
        assert wait_for(lambda: status(tmp_path).get("daemon", {}).get("passes", 0) >= 1, 30)
        assert status(tmp_path)["bootstrap"] == {"sim": {"waiting": 2, "running": 0, "done": 0, "failed": 0}}
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]


def test_a_stop_between_two_bootstrap_batches_leaves_no_host_shown_running(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    """The SIGTERM comes during the first batch: the second is not started (the pass ends early,
    with no status of its own); the final status shows no play running, its host waiting."""
    op_facts(fake)
    lifecycle = Lifecycle(site(tmp_path, fake, ca[0]), lambda: site(tmp_path, fake, ca[0]))
    plays: list[str] = []

    def play(provider: str, hosts: Any) -> dict[str, str]:
        plays.append(status(tmp_path)["bootstrap"]["sim"]["running"])
        lifecycle.request_stop("SIGTERM")
        return {h.name: "stopped: not finished: the daemon is stopping" for h in hosts}

    options = DaemonOptions(tmp_path, bootstrap=play, engine=object(), reconciler=TwoBatches)  # type: ignore[arg-type]
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(Daemon(lifecycle, options).run()))
    runner.start()
    runner.join(60)
    assert result == [0]
    assert plays == [1]  # the first batch ran, shown running; the second never started
    final = status(tmp_path)
    assert final["daemon"]["state"] == "stopped"
    assert final["bootstrap"] == {"sim": {"waiting": 2, "running": 0, "done": 0, "failed": 0}}
