"""A replay's model world and figures drawn from a flight recording (``replay/recorded.py``,
docs/replay.md "From a recording"): the job inference round trip through the real flight
recorder, the latencies, refusal windows, losses, and what the recording says happened."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.controller.types import HostEvent, HostInfo
from orchestrator.configfile import parse_config
from orchestrator.daemon.flightrecorder import FlightRecorder
from orchestrator.model.config import Config, RecordingSettings
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.recording import DEMAND, HOST, NOTICE, OP, REFUSAL, Record, RecordingError
from orchestrator.replay.model import Job, Loss, RefusalWindow
from orchestrator.replay.recorded import figures_of_recording, model_of_recording
from orchestrator.replay.recorded_jobs import DEFAULT_DURATION, MATCH_SLACK
from orchestrator.workspace.recordings import read_period, recordings_dir

T0 = 1_800_000_000.0
SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim, max_instances: 10}
templates:
  cpu:
    providers:
      sim:
        image: baked
        cost_per_hour: 3.6
        offerings:
          - {flavor: c8, cost_per_hour: 3.6}
          - {flavor: c4, cost_per_hour: 1.8}
  gpu:
    providers:
      sim: {flavor: g4, image: baked, cost_per_hour: 7.2}
"""


def site() -> Config:
    return parse_config(SITE, "site.yaml", Path("/")).config


# -- the inference round trip: a known workload through the real flight recorder -------------


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


# A job of the round trip: (submit, duration, hosts).
Work = tuple[float, float, int]


@dataclass
class Cluster:
    """A fixed supply of hosts of one template running jobs first in, first out, as the simulated
    controller does (a job's hosts start and end together; the queue's head waits for enough idle
    hosts): each change pushes a demand snapshot (received ``lag`` seconds later by the daemon's
    clock), each host event goes to the recorder with the controller's time."""

    recorder: FlightRecorder
    clock: Clock
    hosts: list[str]
    lag: float = 0.2
    queue: list[Work] = field(default_factory=list)  # pending
    running: dict[str, float] = field(default_factory=dict)  # host → when its job ends
    seq: int = 0

    def event(self, kind: str, host: str, t: float) -> None:
        state = "busy" if kind == "busy" else "idle"
        info = HostInfo(host, state, provider="sim", template="cpu", instance_key=f"op-0-{host}")
        self.recorder.host_event(HostEvent(kind, info, t))

    def push(self, t: float) -> None:
        self.seq += 1
        busy = len(self.running)
        hosts, queued = len(self.hosts), sum(w[2] for w in self.queue)
        counts = TemplateDemand("cpu", queued, queued, 0, hosts, hosts - busy, busy)
        self.clock.now = t + self.lag
        self.recorder.demand(DemandSnapshot(self.seq, 1, t, (counts,)))

    def step(self, t: float) -> None:
        for host, ends in sorted(self.running.items()):
            if ends <= t:
                del self.running[host]
                self.event("idleSince", host, ends)
        while self.queue:
            idle = [h for h in self.hosts if h not in self.running]
            _submit, duration, hosts = self.queue[0]
            if len(idle) < hosts:
                break
            self.queue.pop(0)
            for host in idle[:hosts]:
                self.running[host] = t + duration
                self.event("busy", host, t)
        self.push(t)

    def run(self, jobs: Sequence[Work], until: float) -> None:
        """Every submission and every end up to ``until``, in time order."""
        pending = sorted(jobs)
        while True:
            due = [e for e in self.running.values() if e <= until] + [w[0] for w in pending[:1]]
            if not due:
                return
            t = min(due)
            while pending and pending[0][0] <= t:
                self.queue.append(pending.pop(0))
            self.step(t)


def recorded(tmp_path: Path, jobs: Sequence[Work], hosts: int, until: float) -> list[Record]:
    clock = Clock()
    recorder = FlightRecorder(tmp_path, RecordingSettings(), clock)
    cluster = Cluster(recorder, clock, [f"h{i}" for i in range(hosts)])
    cluster.push(T0)
    cluster.run(jobs, until)
    cluster.event("joined", "late", until)  # the recording's last record: its end
    clock.now = until
    recorder.close()
    return read_period(recordings_dir(tmp_path))


def test_the_jobs_inferred_from_a_recording_are_the_jobs_that_ran(tmp_path: Path) -> None:
    # Three hosts; bursts that queue, gaps that leave hosts idle, and work still pending at the end.
    truth = [
        (T0 + 10, 100.0, 1),  # h0 until +110
        (T0 + 12, 50.0, 2),  # h1, h2 until +62
        (T0 + 15, 30.0, 1),  # waits for a host: +62 to +92
        (T0 + 20, 80.0, 2),  # waits for two: +92 to +172
        (T0 + 300, 40.0, 3),  # starts at once: never pending
        (T0 + 500, 200.0, 1),
        (T0 + 501, 200.0, 1),
        (T0 + 502, 150.0, 2),  # waits for two hosts, one left: still pending at the end (+600)
    ]
    records = recorded(tmp_path, truth, hosts=3, until=T0 + 600)
    model = model_of_recording(records)
    assert model.start == T0 + 0.2 and model.end == T0 + 600 and model.source == "recording"
    jobs = sorted(model.jobs, key=lambda j: j.submit)
    assert {j.template for j in jobs} == {"cpu"}
    # Submit times within the lag of the demand record (less than the matching slack); durations
    # and hosts exact for the work that ended.
    ended = [(s, d, h) for s, d, h in truth if s < T0 + 500]
    assert len(jobs) == len(ended) + 4
    for job, (submit, duration, hosts) in zip(jobs, ended, strict=False):
        assert abs(job.submit - submit) <= MATCH_SLACK, (job, submit)
        assert (job.duration, job.hosts) == (pytest.approx(duration), hosts), job
    # Still running at the end: at least until then; still pending: one-host jobs of the mean.
    mean = sum(d * h for _, d, h in ended) / sum(h for _, _, h in ended)
    assert [(j.submit - T0, j.hosts, j.duration) for j in jobs[len(ended) :]] == [
        (500, 1, 100),
        (501, 1, 99),
        (pytest.approx(502.2), 1, pytest.approx(mean)),
        (pytest.approx(502.2), 1, pytest.approx(mean)),
    ]


def test_a_host_busy_when_the_recording_began_ran_work_from_its_start() -> None:
    def event(t: float, host: str, kind: str) -> Record:
        return Record(T0 + t, HOST, {"host": host, "event": kind, "state": "idle", "template": "cpu"})

    records = [
        Record(T0, DEMAND, demand(pending=0, busy=3)),
        event(10, "h2", "closing"),  # busy, closed: closed when its work ends
        event(20, "h3", "closed"),  # idle, closed at once: it ran nothing
        event(40, "h0", "idleSince"),
        event(45, "h1", "idleSince"),
        event(50, "h2", "closed"),
        event(55, "h4", "idleSince"),  # the first demand record counted three busy hosts only
        Record(T0 + 60, DEMAND, demand(pending=0, busy=0)),
    ]
    durations = [j.duration for j in model_of_recording(records).jobs if j.submit == T0]
    assert sorted(durations) == [40.0, 45.0, 50.0]


def test_work_requeued_at_a_spot_notice_is_the_part_that_ran_and_the_rerun() -> None:
    def event(t: float, host: str, kind: str) -> Record:
        return Record(T0 + t, HOST, {"host": host, "event": kind, "state": "busy", "template": "cpu"})

    records = [
        Record(T0, DEMAND, demand(pending=0)),
        event(10, "h0", "busy"),
        event(40, "h0", "interruptionNotice"),
        Record(T0 + 40.1, DEMAND, demand(pending=1)),  # requeued
        event(55, "h1", "busy"),
        Record(T0 + 55.1, DEMAND, demand(pending=0, busy=1)),
        event(70, "h0", "lost"),
        event(155, "h1", "idleSince"),
    ]
    assert model_of_recording(records).jobs == (Job(T0 + 10, "cpu", 1, 30.0), Job(T0 + 40.1, "cpu", 1, 100.0))


def test_pending_work_of_a_template_that_ran_nothing_gets_the_default_duration() -> None:
    records = [Record(T0, DEMAND, demand(pending=0)), Record(T0 + 5, DEMAND, demand(pending=2))]
    model = model_of_recording(records)
    assert model.jobs == (Job(T0 + 5, "cpu", 1, DEFAULT_DURATION),) * 2


def test_a_pending_increase_that_never_started_and_is_gone_at_the_end_is_dropped() -> None:
    records = [
        Record(T0, DEMAND, demand(pending=0)),
        Record(T0 + 5, DEMAND, demand(pending=1)),
        Record(T0 + 9, DEMAND, demand(pending=0)),  # cancelled
    ]
    assert model_of_recording(records).jobs == ()


def test_an_empty_recording_is_refused() -> None:
    with pytest.raises(RecordingError, match="no records"):
        model_of_recording([])


def demand(pending: int, busy: int = 0) -> dict[str, Any]:
    counts = {"wanted": pending, "pending": pending, "inFlight": 0, "joined": busy, "idle": 0, "busy": busy}
    return {"term": 1, "seq": 1, "templates": {"cpu": counts}}


# -- latencies, refusal windows, losses ------------------------------------------------------


def op(t: float, op_id: str, event: str, **more: Any) -> Record:
    return Record(t, OP, {"op": op_id, "provider": "sim", "event": event, "template": "cpu", **more})


def fact(t: float, event: str, key: str, **more: Any) -> Record:
    return Record(t, HOST, {"host": more.pop("host", ""), "event": event, "provider": "sim", "key": key, **more})


def test_latencies_are_intent_to_created_per_op_and_expected_to_joined_per_host() -> None:
    records = [
        Record(T0, DEMAND, demand(0)),
        op(T0 + 1, "op-1", "intent", count=2),
        op(T0 + 4, "op-1", "created", key="op-1-000"),
        op(T0 + 5, "op-1", "created", key="op-1-001"),
        fact(T0 + 6, "expected", "op-1-000", host="a"),
        fact(T0 + 6, "expected", "op-1-001", host="b"),
        Record(T0 + 26, HOST, {"host": "a", "event": "joined", "state": "idle"}),
        Record(T0 + 36, HOST, {"host": "b", "event": "joined", "state": "idle"}),
        op(T0 + 40, "op-2", "intent", count=1),
        op(T0 + 42.5, "op-2", "created", key="op-2-000"),
    ]
    model = model_of_recording(records)
    assert model.latencies.launch == (3.0, 2.5)
    assert model.latencies.join == (20.0, 30.0)


def refusal(t: float, scope: str, placement: str, first: float, last: float) -> Record:
    data = {"scope": scope, "provider": "sim", "placement": placement, "failures": 1, "first": first, "last": last}
    return Record(t, REFUSAL, {**data, "until": last + 60, "text": "no capacity"})


def test_refusal_windows_are_first_to_last_merged_where_they_overlap() -> None:
    records = [
        Record(T0, DEMAND, demand(0)),
        refusal(T0 + 10, "capacity", "c8", T0 + 10, T0 + 10),
        refusal(T0 + 30, "capacity", "c8", T0 + 10, T0 + 30),  # the same row, longer
        refusal(T0 + 50, "capacity", "c4", T0 + 50, T0 + 40),  # last before first: one instant
        refusal(T0 + 90, "capacity", "c8", T0 + 90, T0 + 95),  # a later row
        refusal(T0 + 99, "quota", "c8", T0 + 99, T0 + 120),  # quota: every offering
    ]
    assert model_of_recording(records).refusals == (
        RefusalWindow("capacity", "sim", "c8", T0 + 10, T0 + 30),
        RefusalWindow("capacity", "sim", "c4", T0 + 50, T0 + 50),
        RefusalWindow("capacity", "sim", "c8", T0 + 90, T0 + 95),
        RefusalWindow("quota", "sim", "", T0 + 99, T0 + 120),
    )


def test_losses_are_the_lost_facts_with_the_lead_of_their_notice() -> None:
    reason = json.dumps({"reason": "spot-reclaim", "state": "terminated"}, sort_keys=True)
    notice = {"provider": "sim", "instance_id": "i-1", "noticed_at": T0 + 20, "reclaim_at": T0 + 140}
    records = [
        Record(T0, DEMAND, demand(0)),
        op(T0 + 1, "op-1", "intent", count=2),
        Record(T0 + 21, NOTICE, {"notice": {**notice, "kind": "spot"}}),
        fact(T0 + 150, "lost", "op-1-000", instance="i-1", reason=reason, op="op-1"),
        fact(T0 + 151, "lost", "op-1-000", instance="i-1", reason=reason, op="op-1"),  # the same loss again
        # The controller's own "lost" (a connection gone) is no cloud loss.
        Record(T0 + 160, HOST, {"host": "b", "event": "lost", "state": "lost", "key": "op-1-001"}),
        fact(T0 + 170, "lost", "op-1-001", reason="", op="op-1"),
    ]
    assert model_of_recording(records).losses == (
        Loss(T0 + 150, "sim", "cpu", "spot-reclaim", 120.0),
        Loss(T0 + 170, "sim", "cpu", "lost", 0.0),
    )


# -- what the recording says happened ------------------------------------------------------


def test_figures_price_each_instance_by_the_candidate_from_made_to_gone() -> None:
    config = site()
    records = [
        Record(T0, DEMAND, demand(pending=2)),
        op(T0 + 10, "op-1", "intent", count=2, placements=[["c8", 1], ["c4", 1]]),
        op(T0 + 20, "op-1", "created", key="op-1-000", instance="i-0"),
        op(T0 + 20, "op-1", "created", key="op-1-001", instance="i-1"),
        Record(T0 + 60, DEMAND, demand(pending=0, busy=2)),
        fact(T0 + 620, "returned", "op-1-000"),
        fact(T0 + 1220, "lost", "op-1-001", reason='{"reason": "spot-reclaim"}'),
        Record(T0 + 1800, DEMAND, demand(pending=1)),
        Record(T0 + 3600, DEMAND, demand(pending=0)),
    ]
    figures = figures_of_recording(records, config, samples_every=600)
    # c8 at 3.6/h for 600 s, c4 at 1.8/h for 1200 s: Σ lifetime × price / 3600.
    assert figures.label == "recorded" and (figures.start, figures.end) == (T0, T0 + 3600)
    assert figures.cost == pytest.approx(600 * 3.6 / 3600 + 1200 * 1.8 / 3600)
    assert figures.host_hours == pytest.approx(1800 / 3600)
    # 2 hosts pending for 60 s, 1 for 1800 s.
    assert figures.pending_host_minutes == pytest.approx(2 * 60 / 60 + 1800 / 60)
    assert (figures.launches, figures.returns, figures.lost) == (2, 1, 1)
    assert figures.by_template["cpu"]["cost"] == pytest.approx(figures.cost)
    assert figures.by_template["cpu"]["launches"] == 2
    spend = {s.t - T0: s.spend for s in figures.samples}
    supply = {s.t - T0: s.supply for s in figures.samples}
    demanded = {s.t - T0: s.demand for s in figures.samples}
    assert sorted(spend) == [0, 600, 1200, 1800, 2400, 3000, 3600]
    assert spend[600] == pytest.approx(580 * 3.6 / 3600 + 580 * 1.8 / 3600)
    assert spend[3600] == pytest.approx(figures.cost)
    assert (supply[0], supply[600], supply[1200], supply[1800]) == (0, 2, 1, 0)
    assert (demanded[0], demanded[600], demanded[1800], demanded[3600]) == (2, 2, 1, 0)


def test_an_instance_the_recording_did_not_see_made_counts_from_its_start_at_its_default_price() -> None:
    config = site()
    gpu_host = {"provider": "sim", "template": "gpu", "key": "op-0-000"}
    records = [
        Record(T0, DEMAND, demand(pending=0, busy=1)),
        Record(T0 + 30, HOST, {"host": "a", "event": "idleSince", "state": "idle", **gpu_host}),
        fact(T0 + 100, "returned", "op-0-000", template="gpu"),
        Record(T0 + 200, DEMAND, demand(pending=0)),
    ]
    figures = figures_of_recording(records, config)
    assert figures.cost == pytest.approx(100 * 7.2 / 3600)
    assert (figures.launches, figures.returns) == (0, 1)


def test_a_live_instance_counts_until_the_end() -> None:
    config = site()
    records = [
        Record(T0, DEMAND, demand(pending=1)),
        op(T0 + 10, "op-1", "intent", count=1),
        op(T0 + 10, "op-1", "created", key="op-1-000"),
        Record(T0 + 3610, DEMAND, demand(pending=0)),
    ]
    figures = figures_of_recording(records, config)
    assert figures.cost == pytest.approx(3.6) and figures.host_hours == pytest.approx(1.0)
    assert figures.samples[-1].t == T0 + 3610 and figures.samples[-1].supply == 1


def test_a_recording_the_daemon_s_parts_wrote_gives_its_latencies_and_instances(tmp_path: Path) -> None:
    """The real reconcile pass (a fake Terraform engine, an in-memory fact log) feeding the real
    flight recorder as the daemon does: the records' shapes are the ones read here."""
    from orchestrator.configfile import load_config
    from orchestrator.daemon.guarded import guard_parts
    from orchestrator.daemon.lifecycle import Lifecycle
    from orchestrator.daemon.metrics import DaemonMetrics
    from orchestrator.ops.executor import Wired
    from orchestrator.reconcile.loop import Reconciler
    from tests.tffake import FakeEngine, FakeHosts, FakeView, StampedFacts, unit_parts

    doc: dict[str, Any] = {
        "cluster": "unit",
        "state_dir": str(tmp_path / "state"),
        "controller": {"ca": "system"},
        "providers": {"sim": {"module": "xcesim", "max_instances": 10}},
        "templates": {"cpu": {"providers": {"sim": {"flavor": "c8", "image": "debian-12", "cost_per_hour": 0.5}}}},
    }
    (tmp_path / "xceprov.yaml").write_text(json.dumps(doc))
    loaded = load_config(str(tmp_path / "xceprov.yaml"))
    config = loaded.config
    now = [T0]
    facts, hosts = StampedFacts(lambda: now[0]), FakeHosts()
    parts = unit_parts(loaded, FakeEngine(), facts=facts, hosts=hosts, clock=lambda: now[0])
    recorder = FlightRecorder(config.state_dir, config.daemon.recording, lambda: now[0])
    guard = guard_parts(parts, Lifecycle(loaded, lambda: loaded), DaemonMetrics())  # as the daemon wires it
    guard.observer = recorder.facts
    view = FakeView(facts, hosts)
    reconciler = Reconciler(config, Wired.of(parts), view, clock=lambda: now[0], state_dir=config.state_dir)
    view.want(cpu=2)
    assert view.snapshot is not None
    recorder.demand(view.snapshot)
    recorder.after_pass(reconciler.run_once())
    now[0] += 90
    for fact in facts.committed:
        if fact.host_name:
            info = HostInfo(fact.host_name, "idle", template="cpu", provider="sim", instance_key=fact.instance_key)
            recorder.host_event(HostEvent("joined", info, time=now[0]))
    now[0] = T0 + 3600
    recorder.demand(DemandSnapshot(2, 1, now[0], (TemplateDemand("cpu", 0, 0, 0, 2, 2, 0),)))
    recorder.close()
    records = read_period(recordings_dir(config.state_dir))

    model = model_of_recording(records)
    assert model.latencies.launch == (0.0,)  # the fake engine takes no time
    assert model.latencies.join == (90.0, 90.0)
    # Priced by the candidate (1.5 per hour, not the recorded 0.5): two instances for the hour.
    doc["templates"]["cpu"]["providers"]["sim"]["cost_per_hour"] = 1.5
    candidate = parse_config(json.dumps(doc), "candidate.yaml", tmp_path).config
    figures = figures_of_recording(records, candidate)
    assert figures.launches == 2 and figures.host_hours == pytest.approx(2.0)
    assert figures.cost == pytest.approx(3.0)
