"""The daemon's guard and watch on the executor: ops held as work in flight, none started once stopping,
outcomes counted."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.configfile import parse_config
from orchestrator.daemon.guarded import (
    NotStarted,
    PassAborted,
    StopGuard,
    guard_parts,
    guarded_bootstrap,
    stoppable_sleep,
)
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.parts import LoopParts, default_reconciler
from orchestrator.daemon.systemd import Heartbeat
from orchestrator.errors import FinalError, LeaseLost
from orchestrator.model.facts import Epoch
from orchestrator.ops.executor import (
    Created,
    CreateOp,
    CreateResult,
    OpParts,
    OpRecorder,
    Recorder,
    ReturnOp,
    ReturnResult,
    StartOp,
    Wired,
)
from orchestrator.reconcile.loop import Reconciler
from tests.unit.daemon.daemon_helpers import loaded, site_text


def ops_total(metrics: DaemonMetrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.labels["kind"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "xceprov_ops_total"
    }


@pytest.fixture
def lifecycle() -> Lifecycle:
    site = loaded("{stop_timeout: 5s}")
    return Lifecycle(site, lambda: site)


@dataclass
class Guarded:
    """The daemon's executor as ``service.py`` wires it: its parts guarded and watched (``guard_parts``)."""

    ops: Wired
    guard: StopGuard

    def create(self, provider: str, template: str, count: int, op_id: str | None = None) -> CreateResult:
        return self.ops.executor.create(provider, template, count, op_id)

    def start_pool(self, provider: str, template: str, keys: Sequence[str], op_id: str | None = None) -> CreateResult:
        return self.ops.executor.start_pool(provider, template, keys, op_id)

    def return_instances(self, provider: str, keys: Sequence[str], **kw: Any) -> ReturnResult:
        return self.ops.executor.return_instances(provider, keys, **kw)

    @property
    def recorder(self) -> OpRecorder:
        return self.ops.parts.recorder


def executor(lifecycle: Lifecycle, metrics: DaemonMetrics, heartbeat: Heartbeat | None = None) -> Guarded:
    parts = OpParts(
        lifecycle.config.config,
        Path("/nonexistent"),
        object(),  # type: ignore[arg-type]  # never reached: the create and return ops are replaced below
        object(),  # type: ignore[arg-type]
        object(),  # type: ignore[arg-type]
        object(),  # type: ignore[arg-type]
    )
    guard = guard_parts(parts, lifecycle, metrics, heartbeat)
    return Guarded(Wired.of(parts), guard)


def test_an_op_is_work_in_flight_and_a_stop_refuses_the_next(
    lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: list[str] = []

    def create(
        self: CreateOp, provider: str, template: str, count: int, op_id: str | None = None, **kw: Any
    ) -> CreateResult:
        assert op_id is not None
        seen.append(op_id)
        inside.set()
        release.wait(10)
        return CreateResult(op_id, provider, template)

    monkeypatch.setattr(CreateOp, "create", create)
    metrics = DaemonMetrics()
    ex = executor(lifecycle, metrics)
    worker = threading.Thread(target=ex.create, args=("sim", "cpu", 2))
    worker.start()
    assert inside.wait(10)
    lifecycle.request_stop("SIGTERM")
    # The stop waits for the op (named by its id) instead of cutting it off...
    done: list[int] = []
    stopper = threading.Thread(target=lambda: done.append(lifecycle.shutdown()))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive() and not done
    # ...and no new op starts: refused before its intent, as a LeaseLost (nothing to close).
    with pytest.raises(NotStarted, match=r"not starting op-.*: the daemon is stopping") as info:
        ex.create("sim", "cpu", 1)
    assert isinstance(info.value, LeaseLost)
    release.set()
    worker.join(10)
    stopper.join(10)
    assert done == [0]
    assert len(seen) == 1
    assert ops_total(metrics) == {("create", "succeeded"): 1.0}


def test_outcomes_parked_and_failed_are_counted(lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch) -> None:
    def create(
        self: CreateOp, provider: str, template: str, count: int, op_id: str | None = None, **kw: Any
    ) -> CreateResult:
        raise LeaseLost("lease for provider 'sim' lapsed")

    def return_instances(self: ReturnOp, provider: str, keys: Sequence[str], **kw: Any) -> ReturnResult:
        raise FinalError("plan would delete more")

    monkeypatch.setattr(CreateOp, "create", create)
    monkeypatch.setattr(ReturnOp, "return_instances", return_instances)
    metrics = DaemonMetrics()
    ex = executor(lifecycle, metrics)
    with pytest.raises(LeaseLost):
        ex.create("sim", "cpu", 1)
    with pytest.raises(FinalError):
        ex.return_instances("sim", ["op-a-000"])
    assert ops_total(metrics) == {("create", "parked"): 1.0, ("return", "failed"): 1.0}


def test_a_warm_pool_start_is_held_in_flight_and_counted_as_a_start(
    lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    def start_pool(
        self: StartOp, provider: str, template: str, keys: Sequence[str], op_id: str | None = None
    ) -> CreateResult:
        assert op_id is not None
        return CreateResult(op_id, provider, template, [Created(keys[0], "i-0", "h0", "", template, 0.0)])

    monkeypatch.setattr(StartOp, "start", start_pool)
    metrics = DaemonMetrics()
    assert len(executor(lifecycle, metrics).start_pool("sim", "cpu", ["op-a-000"]).created) == 1
    assert ops_total(metrics) == {("start", "succeeded"): 1.0}
    lifecycle.request_stop("SIGTERM")
    with pytest.raises(NotStarted, match=r"not starting op-.*: the daemon is stopping"):
        executor(lifecycle, metrics).start_pool("sim", "cpu", ["op-a-001"])


def test_every_op_that_ends_is_one_log_line_with_its_outcome_and_duration(
    lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    created = [Created(f"op-b-00{i}", f"i-{i}", f"h{i}", "10.0.0.1", "cpu", 0.0) for i in range(2)]

    def create(
        self: CreateOp, provider: str, template: str, count: int, op_id: str | None = None, **kw: Any
    ) -> CreateResult:
        assert op_id is not None
        return CreateResult(op_id, provider, template, created)

    def return_instances(self: ReturnOp, provider: str, keys: Sequence[str], **kw: Any) -> ReturnResult:
        if "op-x-000" in keys:
            raise FinalError("plan would delete more\nthan asked")
        return ReturnResult("op-r", provider, list(keys), deleted=list(keys))

    monkeypatch.setattr(CreateOp, "create", create)
    monkeypatch.setattr(ReturnOp, "return_instances", return_instances)
    ex = executor(lifecycle, DaemonMetrics())
    caplog.set_level(logging.INFO, logger="orchestrator.daemon.guarded")
    ex.create("sim", "cpu", 2, op_id="op-b")
    ex.return_instances("sim", ["op-b-000"], reason="reclaim: idle")
    with pytest.raises(FinalError):
        ex.return_instances("sim", ["op-x-000"])
    lines = [(r.levelname, re.sub(r"after [\d.]+s", "after Ns", r.getMessage())) for r in caplog.records]
    assert lines == [
        ("INFO", "op op-b (create of 2 cpu on sim): succeeded after Ns: 2 instances created"),
        ("INFO", "return of 1 instances on sim (reclaim: idle): succeeded after Ns: op op-r returned 1"),
        ("WARNING", "return of 1 instances on sim: failed after Ns: FinalError: plan would delete more"),
    ]
    assert (caplog.records[0].op_id, caplog.records[0].provider) == ("op-b", "sim")  # type: ignore[attr-defined]


def test_every_audited_step_beats_the_heartbeat(lifecycle: Lifecycle, tmp_path: Path) -> None:
    now = [0.0]
    heartbeat = Heartbeat(max_age=10.0, clock=lambda: now[0])
    ex = executor(lifecycle, DaemonMetrics(), heartbeat)
    ex.ops.parts.config = ex.ops.parts.config.model_copy(update={"state_dir": tmp_path})
    now[0] = 11.0
    assert not heartbeat.healthy()
    ex.recorder.audit("op-apply", provider="sim", op="op-1")  # a long burst's steps keep the watchdog fed
    assert heartbeat.healthy()


def test_plays_and_drain_waits_stop_with_the_daemon(lifecycle: Lifecycle) -> None:
    ran: list[str] = []

    def play(provider: str, created: Sequence[Created]) -> dict[str, str]:
        ran.append(provider)
        return {"h1": "ok"}

    boot = guarded_bootstrap(play, lifecycle)
    sleep = stoppable_sleep(lifecycle)
    assert boot("sim", []) == {"h1": "ok"}
    sleep(0.01)
    lifecycle.request_stop("SIGTERM")
    # Not an Exception: the pass would count it as a failed attempt of every host of the batch.
    with pytest.raises(PassAborted, match="not starting bootstrap on sim") as info:
        boot("sim", [])
    assert not isinstance(info.value, Exception)
    with pytest.raises(NotStarted, match="not waiting for hosts to drain"):
        sleep(60)  # returns at once, not after a minute
    assert ran == ["sim"]


def test_once_stopping_an_op_takes_a_step_only_if_it_already_took_one(
    lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Recorder, "gate", lambda self, provider, op_id, step: Epoch(1, 1))
    ex = executor(lifecycle, DaemonMetrics())
    ex.guard.new_pass()
    assert ex.recorder.gate("sim", "op-running", "intent") == Epoch(1, 1)
    lifecycle.request_stop("SIGTERM")
    # The op in flight goes on to its next step (the fence decides when it parks)...
    assert ex.recorder.gate("sim", "op-running", "instance facts") == Epoch(1, 1)
    # ...an open op the pass was about to resume does not start: it resumes at the next start.
    with pytest.raises(NotStarted, match="op op-parked on provider sim: not started \\(apply\\)"):
        ex.recorder.gate("sim", "op-parked", "apply")


def test_a_sigterm_stops_a_running_bootstrap_play_within_half_the_bound(lifecycle: Lifecycle) -> None:
    from orchestrator.daemon.guarded import play_stop

    stop = play_stop(lifecycle)
    assert not stop.requested() and stop.grace == 2.5  # half of daemon.stop_timeout (5s)
    lifecycle.request_stop("SIGTERM")
    assert stop.requested() and stop.reason == "the daemon is stopping"


def test_the_daemon_s_reconciler_holds_a_resume_beside_the_pass_as_work_in_flight(
    lifecycle: Lifecycle, tmp_path: Path
) -> None:
    """A lease gained during a pass is resumed on a thread of its own (reconcile/beside.py): the
    daemon's reconciler holds it as work in flight, so a stop waits for it and starts none."""
    config = parse_config(f"{site_text()}state_dir: {tmp_path / 'state'}\n", "site.yaml", tmp_path).config
    link = ControllerLink(config.controller, instance_id="site1-daemon-test", providers=["sim"], cluster="site1")
    built = default_reconciler(
        LoopParts(config, executor(lifecycle, DaemonMetrics()).ops, link, None, time.time, lifecycle)
    )
    assert isinstance(built, Reconciler)
    stopped = threading.Event()
    with built.hold("resume of sim"):
        lifecycle.request_stop("SIGTERM")
        threading.Thread(target=lambda: (lifecycle.shutdown(), stopped.set()), daemon=True).start()
        assert not stopped.wait(0.3)  # the stop waits for the resume in flight
    assert stopped.wait(10)
    with (
        pytest.raises(NotStarted, match="not starting resume of sim: the daemon is stopping"),
        built.hold("resume of sim"),
    ):
        pass
