"""A daemon with a shared store: it asks only for its share, hands providers over between passes,
and mutates nothing while the store is down (a fake store; the real keeper and a fake controller)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon import service
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.service import Daemon, DaemonOptions, LoopParts
from orchestrator.errors import LeaseLost
from orchestrator.orphans.report import ScanReport
from tests.unit.clients.controller.ctlfake import FakeConn, FakeController, wait_for
from tests.unit.daemon.daemon_helpers import Report
from tests.unit.daemon.memberfake import FakeStore

PROVIDERS = ["p1", "p2"]


def site(tmp_path: Path, fake: FakeController, ca: Path) -> LoadedConfig:
    providers = ", ".join(f"{p}: {{module: xcesim}}" for p in PROVIDERS)
    flavors = ", ".join(f"{p}: {{flavor: c8.large, image: debian-12}}" for p in PROVIDERS)
    text = f"""
cluster: unit
state_dir: {tmp_path / "state"}
controller: {{addresses: ["{fake.address}"], ca: {ca}, connect_timeout: 2, request_timeout: 2, lease_margin: 0.5}}
daemon: {{reconcile_interval: 1s, stop_timeout: 5s}}
providers: {{{providers}}}
templates: {{cpu: {{providers: {{{flavors}}}}}}}
"""
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def status(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "state" / "daemon" / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


class Pass:
    """Stands in for the reconciler: which gates passed at each pass; can be held open."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.passes: list[tuple[str, dict[str, bool]]] = []
        self.errors: list[str] = []
        self.hold = threading.Event()
        self.held = threading.Event()
        self.during: list[dict[str, bool]] = []

    def valid(self) -> dict[str, bool]:
        return {p: self.parts.ops.parts.fence.valid(p) for p in PROVIDERS}

    def run_once(self, trigger: str = "interval") -> Any:
        seen = self.valid()
        for p in PROVIDERS:
            if not seen[p]:
                try:
                    self.parts.ops.parts.fence.gate(p)
                except LeaseLost as exc:
                    self.errors.append(str(exc))
        if self.hold.is_set():
            self.held.set()
            deadline = time.monotonic() + 30
            while self.hold.is_set() and time.monotonic() < deadline:
                self.during.append(self.valid())
                time.sleep(0.1)
        self.passes.append((trigger, seen))
        return Report(trigger)

    def reload(self, config: Any) -> None:
        pass


class NoScan:
    def __call__(self, parts: LoopParts) -> NoScan:
        return self

    def scan(self, act: bool = False, provider: str | None = None) -> ScanReport:
        report = ScanReport("unit", time.time(), act=act)
        report.finished = time.time()
        return report


def started(
    tmp_path: Path, fake: FakeController, ca: Path, store: FakeStore
) -> tuple[Daemon, list[Pass], list[int], threading.Thread]:
    """A daemon over ``store`` running on a thread: it, its passes, its exit status, the thread."""
    loaded = site(tmp_path, fake, ca)
    made: list[Pass] = []

    def factory(parts: LoopParts) -> Pass:
        made.append(Pass(parts))
        return made[-1]

    options = DaemonOptions(
        tmp_path,
        engine=object(),  # type: ignore[arg-type]
        reconciler=factory,
        orphan_scanner=NoScan(),  # type: ignore[arg-type]
        member_store=lambda _config: store,
    )
    daemon = Daemon(Lifecycle(loaded, lambda: loaded), options)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    return daemon, made, result, runner


def released(fake: FakeController, lock: threading.Lock, log: list[tuple[str, str]]) -> None:
    def recording(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        with lock:
            log.append((member, str(payload["provider"])))
        return fake.default(member, payload, conn)

    for member in ("leaseAcquire", "leaseRelease"):
        fake.handlers[member] = recording


def test_the_daemon_holds_its_share_hands_over_between_passes_and_stops_while_the_store_is_down(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    store = FakeStore(time.monotonic)
    store.put("zzz-other", PROVIDERS)  # sorts after this daemon's instance: p1 is ours, p2 its
    lock = threading.Lock()
    asked: list[tuple[str, str]] = []
    released(fake, lock, asked)
    leave = store.leave

    def leaving(instance: str) -> None:
        with lock:
            asked.append(("leave", instance))
        leave(instance)

    store.leave = leaving  # type: ignore[method-assign]
    daemon, made, result, runner = started(tmp_path, fake, ca[0], store)
    lifecycle = daemon.lifecycle
    other_alive = threading.Event()
    other_alive.set()

    def other_beats() -> None:  # the other daemon's heartbeat, while it lives
        while other_alive.is_set() and runner.is_alive():
            store.put("zzz-other", PROVIDERS)
            time.sleep(0.2)

    threading.Thread(target=other_beats, daemon=True).start()
    try:
        assert wait_for(lambda: made and made[0].passes, 30)
        run = made[0]
        # The first pass: its share (p1) held, p2 never asked for (the other's).
        assert run.passes[0] == ("start", {"p1": True, "p2": False}), run.passes
        assert ("leaseAcquire", "p2") not in asked
        assert "not asked for: dealt to another instance" in run.errors[0]
        assert wait_for(lambda: (status(tmp_path).get("store") or {}).get("members"), 30)
        doc = status(tmp_path)
        mine = doc["store"]["instance"]
        assert doc["store"]["dealt"] == ["p1"] and doc["store"]["reachable"]
        # Its row: its label, what it is configured for, what it holds with the epoch.
        assert wait_for(lambda: set(store.rows[mine][2]) == {"p1"}, 30), store.rows[mine]
        label, configured, held_epochs, _at = store.rows[mine]
        assert label == doc["daemon"]["instance_id"] and configured == ("p1", "p2")
        assert re.fullmatch(r"1\.\d+", held_epochs["p1"])  # the epoch tag (the fake renews with a new seq)

        # The other stops beating: after one TTL p2 is dealt here, acquired, and a pass sees it.
        other_alive.clear()
        assert wait_for(lambda: any(seen == {"p1": True, "p2": True} for _, seen in run.passes), 40), run.passes

        # It comes back: p2 is dealt to it again, released by this daemon between passes only.
        run.hold.set()
        assert wait_for(run.held.is_set, 30)
        other_alive.set()
        threading.Thread(target=other_beats, daemon=True).start()
        assert wait_for(lambda: daemon.membership is not None and daemon.membership.dealt() == {"p1"}, 30)
        time.sleep(2.0)  # heartbeats and loop polls go by while the pass is still running
        assert all(v["p2"] for v in run.during) and ("leaseRelease", "p2") not in asked
        run.hold.clear()
        assert wait_for(lambda: ("leaseRelease", "p2") in asked, 30)
        assert wait_for(lambda: run.passes[-1][1] == {"p1": True, "p2": False}, 30)

        # The store goes down: no provider may be mutated; the status file says since when.
        before = len(run.passes)
        store.down = "connection refused"
        assert wait_for(lambda: not (status(tmp_path).get("store") or {}).get("reachable", True), 30)
        assert wait_for(lambda: run.passes[-1][1] == {"p1": False, "p2": False}, 30)
        assert any("shared store unreachable since" in e for e in run.errors), run.errors
        assert any(trigger == "store" for trigger, _ in run.passes[before:]), run.passes  # the outage woke a pass
        assert daemon.metrics.registry.get_sample_value("xceprov_shared_store_up") == 0
        assert status(tmp_path)["store"]["error"] == "connection refused"
        held = [r for r in status(tmp_path)["leases"] if r["held"]]
        assert [r["provider"] for r in held] == ["p1"]  # the lease is kept: renewing is the controller's
        store.down = ""
        assert wait_for(lambda: run.passes[-1][1] == {"p1": True, "p2": False}, 30)
        assert daemon.metrics.registry.get_sample_value("xceprov_shared_store_up") == 1
    finally:
        other_alive.clear()
        lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]
    # A clean stop: the leases released first, then the member row removed at once.
    assert asked.index(("leaseRelease", "p1")) < asked.index(("leave", mine))
    assert mine not in store.rows


def test_daemons_started_together_do_not_take_each_other_s_share_at_start(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other daemon's first heartbeat lands just after this one's: the share handed to the
    keeper is the one of the second members read, so this daemon never asks for the other's p2.
    After its first pass it prepares the working directories of both, p2 too (a takeover of p2
    then starts without init)."""
    warmed: list[list[str]] = []
    monkeypatch.setattr(service, "warm", lambda _executor, providers: warmed.append(sorted(providers)) or {})
    store = FakeStore(time.monotonic)
    lock = threading.Lock()
    asked: list[tuple[str, str]] = []
    released(fake, lock, asked)
    read = store.members

    def first_then_the_other(live_within: float) -> list[Any]:
        rows = read(live_within)
        store.put("zzz-other", PROVIDERS)  # starting a moment later, and beating on
        return rows

    store.members = first_then_the_other  # type: ignore[method-assign]
    daemon, made, _result, runner = started(tmp_path, fake, ca[0], store)
    lifecycle = daemon.lifecycle
    try:
        assert wait_for(lambda: made and len(made[0].passes) >= 2, 30)
        assert made[0].passes[0] == ("start", {"p1": True, "p2": False})
        with lock:
            assert ("leaseAcquire", "p2") not in asked and ("leaseRelease", "p2") not in asked
        assert warmed == [["p1", "p2"]]  # once, every configured provider, held or not
    finally:
        lifecycle.request_stop("SIGTERM")
        runner.join(30)


def test_a_provider_newly_dealt_is_asked_for_while_the_pass_in_flight_still_runs(
    tmp_path: Path, fake: FakeController, ca: tuple[Path, Any]
) -> None:
    store = FakeStore(time.monotonic)
    store.put("zzz-other", PROVIDERS)  # p2 is the other's while it beats
    lock = threading.Lock()
    asked: list[tuple[str, str]] = []
    released(fake, lock, asked)
    daemon, made, result, runner = started(tmp_path, fake, ca[0], store)
    other_alive = threading.Event()
    other_alive.set()

    def other_beats() -> None:
        while other_alive.is_set() and runner.is_alive():
            store.put("zzz-other", PROVIDERS)
            time.sleep(0.2)

    threading.Thread(target=other_beats, daemon=True).start()
    try:
        assert wait_for(lambda: made and made[0].passes, 30)
        run = made[0]
        assert ("leaseAcquire", "p2") not in asked
        run.hold.set()  # a long pass (filling this daemon's own provider) is in flight
        assert wait_for(run.held.is_set, 30)
        before = len(run.passes)
        other_alive.clear()  # the other dies: after one TTL, p2 is dealt here
        # Asked for (and granted) while that pass still runs, not after it.
        assert wait_for(lambda: ("leaseAcquire", "p2") in asked, 28), asked
        assert run.hold.is_set() and len(run.passes) == before
        run.hold.clear()
        # The next pass starts with p2 held: its open ops are resumed at once.
        assert wait_for(lambda: len(run.passes) > before and run.passes[-1][1] == {"p1": True, "p2": True}, 30)
    finally:
        other_alive.clear()
        daemon.lifecycle.request_stop("SIGTERM")
        runner.join(30)
    assert result == [0]
