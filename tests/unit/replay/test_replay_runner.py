"""run_replay: the real reconcile pass on the virtual clock against a model world, and its figures.

What a user of ``xceprov replay`` relies on: jobs make the real policy launch hosts, which join,
run the work and are returned once idle for the provider's ``idle_time``; the figures add up
(cost is every instance's life times its price, launches are returns plus live plus lost); a
loss is counted and replaced; a capacity window sends the policy to the next offering; the same
model and seed give the same figures; a longer ``idle_time`` costs more host-hours; an observer
hears what the daemon's flight recorder would; the site's own state and shared store are never used.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostEvent
from orchestrator.configfile import parse_config
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.facts import FactKind
from orchestrator.reconcile.report import PassReport
from orchestrator.replay.engine import ModelEngine
from orchestrator.replay.figures import RunFigures
from orchestrator.replay.model import CAPACITY, Job, Latencies, Loss, RefusalWindow, WorldModel
from orchestrator.replay.runner import Replay, replay_config, run_replay

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0
LATENCIES = Latencies(launch=(30.0,), join=(60.0,))

SITE = """
cluster: replayed
state_dir: {state}
controller: {{ca: system}}
daemon: {{reconcile_interval: 60}}
policy: {{cooldown: 0}}
providers:
  sim: {{module: xcesim, max_instances: 10, idle_time: {idle}, hold_time: 0}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}
"""

OFFERINGS = """
cluster: replayed
state_dir: {state}
controller: {{ca: system}}
daemon: {{reconcile_interval: 60}}
providers:
  sim: {{module: xcesim, max_instances: 10, idle_time: 300, hold_time: 0}}
templates:
  cpu:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c8.large}}
          - {{flavor: c16.large, zone: zone-b, cost_per_hour: 0.8}}
"""


def config(tmp_path: Path, text: str = SITE, idle: float = 300) -> Config:
    """A site whose own state directory is ``tmp_path/site`` (a replay must never write there)."""
    text = text.format(state=tmp_path / "site", idle=idle)
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path).config


def model(
    *jobs: Job,
    hours: float = 3,
    losses: tuple[Loss, ...] = (),
    refusals: tuple[RefusalWindow, ...] = (),
    latencies: Latencies = LATENCIES,
) -> WorldModel:
    return WorldModel(START, START + hours * HOUR, jobs, latencies, refusals, losses)


def replay(tmp_path: Path, cfg: Config, world: WorldModel) -> tuple[Replay, RunFigures]:
    """A run (its parts kept for the test to look at) and its figures."""
    run = Replay(cfg, world, state_dir=tmp_path / "run", seed=0, engine=lambda c, k, r: ModelEngine(c, world, k, r))
    return run, run.run()


def test_jobs_are_served_by_hosts_that_are_returned_once_idle(tmp_path: Path) -> None:
    world = model(Job(START + 60, "cpu", 2, 600.0), Job(START + 120, "cpu", 1, 900.0))
    run, figures = replay(tmp_path, config(tmp_path), world)
    assert figures.launches == 3
    assert figures.returns == 3 and figures.lost == 0
    assert not run.controller.works  # every job ran to its end
    for inst in run.cloud.instances.values():
        assert inst.ended is not None
        # Launched after the submit, lived at least its join, its work and the idle time.
        assert inst.launched > START + 60
        assert inst.ended - inst.launched >= 60 + 600 + 300
    # Pending from each submit until its hosts joined: the launch and join latencies and a pass.
    assert 3 * 1.5 <= figures.pending_host_minutes <= 3 * 4
    lifetimes = sum((i.ended or world.end) - i.launched for i in run.cloud.instances.values())
    assert figures.host_hours == pytest.approx(lifetimes / HOUR, abs=1e-3)
    assert figures.cost == pytest.approx(lifetimes / HOUR * 0.5, abs=1e-3)
    assert figures.by_template["cpu"]["launches"] == 3
    assert figures.by_template["cpu"]["cost"] == pytest.approx(figures.cost)
    assert figures.samples[-1].spend == pytest.approx(figures.cost, rel=1e-3)
    assert max(s.supply for s in figures.samples) == 3
    assert max(s.demand for s in figures.samples) == 3


def test_launches_are_returns_plus_live_plus_lost(tmp_path: Path) -> None:
    # Work to the end: hosts still live when the model ends.
    world = model(Job(START + 60, "cpu", 2, 10 * HOUR), Job(START + 60, "cpu", 1, 600.0))
    run, figures = replay(tmp_path, config(tmp_path), world)
    live = sum(1 for i in run.cloud.instances.values() if i.live)
    assert live == 2
    assert figures.launches == figures.returns + live + figures.lost
    assert figures.samples[-1].supply == 2
    lifetimes = sum((i.ended or world.end) - i.launched for i in run.cloud.instances.values())
    assert figures.cost == pytest.approx(lifetimes / HOUR * 0.5, abs=1e-3)


def test_a_loss_is_counted_and_its_host_replaced(tmp_path: Path) -> None:
    world = model(Job(START + 60, "cpu", 1, 2 * HOUR), losses=(Loss(START + HOUR, "sim", "cpu"),))
    run, figures = replay(tmp_path, config(tmp_path), world)
    assert figures.lost == 1
    assert figures.launches == 2
    assert figures.by_template["cpu"]["lost"] == 1
    taken = [i for i in run.cloud.instances.values() if i.reason == "spot-reclaim"]
    assert len(taken) == 1 and taken[0].ended == START + HOUR
    replacement = next(i for i in run.cloud.instances.values() if i is not taken[0])
    assert START + HOUR < replacement.launched < START + HOUR + 300
    # The requeued work started again, on the replacement (and runs past the model's end).
    (work,) = run.controller.works
    assert work.started > replacement.launched
    assert [run.controller.hosts_by_id[h].instance_key for h in work.host_ids] == [replacement.key]


def test_a_noticed_loss_is_replaced_before_the_reclaim(tmp_path: Path) -> None:
    # Two minutes' notice: the host is closed at the notice, its work requeued, and the pass
    # (reading the notice book as the daemon's watch writes it) asks for a replacement at once.
    loss = Loss(START + HOUR, "sim", "cpu", notice=120.0)
    world = model(Job(START + 60, "cpu", 1, 2 * HOUR), losses=(loss,))
    run, figures = replay(tmp_path, config(tmp_path), world)
    assert (figures.lost, figures.launches) == (1, 2)
    taken = next(i for i in run.cloud.instances.values() if i.reason == "spot-reclaim")
    assert taken.ended == START + HOUR
    replacement = next(i for i in run.cloud.instances.values() if i is not taken)
    assert START + HOUR - 120 <= replacement.launched < START + HOUR
    # The requeued work started again on the replacement before the reclaim, and ran to its end
    # (without the notice it restarts only after the loss, and is still running at the end).
    assert run.controller.works == []


def test_a_capacity_window_makes_the_policy_fall_back_to_the_next_offering(tmp_path: Path) -> None:
    window = RefusalWindow(CAPACITY, "sim", "c8.large", START, START + 2 * HOUR)
    world = model(Job(START + 60, "cpu", 2, 600.0), Job(START + 2.5 * HOUR, "cpu", 1, 600.0), refusals=(window,))
    run, figures = replay(tmp_path, config(tmp_path, OFFERINGS), world)
    first = sorted(run.cloud.instances.values(), key=lambda i: i.launched)
    assert [i.offering for i in first] == ["c16.large@zone-b", "c16.large@zone-b", "c8.large"]
    assert figures.launches == 3
    # Priced by the offering each instance is on.
    expected = sum(
        ((i.ended or world.end) - i.launched) / HOUR * (0.8 if i.offering.startswith("c16") else 0.5) for i in first
    )
    assert figures.cost == pytest.approx(expected, abs=1e-3)


def test_the_same_model_and_seed_give_the_same_figures(tmp_path: Path) -> None:
    world = model(
        Job(START + 60, "cpu", 2, 600.0),
        Job(START + 700, "cpu", 3, 1200.0),
        Job(START + 3000, "cpu", 1, 300.0),
        losses=(Loss(START + 900, "sim", "cpu"),),
        latencies=Latencies(launch=(20.0, 40.0, 90.0), join=(30.0, 60.0, 120.0)),
    )
    one = run_replay(config(tmp_path), world, state_dir=tmp_path / "one", seed=3)
    two = run_replay(config(tmp_path), world, state_dir=tmp_path / "two", seed=3)
    assert one.to_json(samples=True) == two.to_json(samples=True)
    other = run_replay(config(tmp_path), world, state_dir=tmp_path / "other", seed=4)
    assert other.to_json(samples=True) != one.to_json(samples=True)  # the seed draws the latencies
    assert one.label == "replayed" and one.lost == 1


def test_a_longer_idle_time_costs_more_host_hours(tmp_path: Path) -> None:
    jobs = [Job(START + 60 + k * 1800, "cpu", 1, 300.0) for k in range(4)]
    short = run_replay(config(tmp_path, idle=300), model(*jobs), state_dir=tmp_path / "short")
    long = run_replay(config(tmp_path, idle=3600), model(*jobs), state_dir=tmp_path / "long")
    assert long.host_hours > short.host_hours
    assert long.cost > short.cost
    assert long.launches < short.launches  # the idle host is still there for the next job


class Observer:
    def __init__(self) -> None:
        self.snapshots: list[DemandSnapshot] = []
        self.events: list[HostEvent] = []
        self.seen: list[Fact] = []
        self.reports: list[PassReport] = []

    def demand(self, snapshot: DemandSnapshot) -> None:
        self.snapshots.append(snapshot)

    def host_event(self, event: HostEvent) -> None:
        self.events.append(event)

    def facts(self, facts: Sequence[Fact]) -> None:
        self.seen.extend(facts)

    def after_pass(self, report: PassReport) -> None:
        self.reports.append(report)


def test_an_observer_hears_pushes_host_events_facts_and_passes(tmp_path: Path) -> None:
    observer = Observer()
    world = model(Job(START + 60, "cpu", 1, 600.0), hours=1)
    figures = run_replay(config(tmp_path), world, state_dir=tmp_path / "run", observe=observer, label="candidate")
    assert figures.label == "candidate"
    assert [f.kind for f in observer.seen].count(FactKind.INSTANCE_CREATED) == figures.launches == 1
    assert [e.kind for e in observer.events][:3] == ["joined", "idleSince", "busy"]
    assert observer.snapshots[0].templates[0].wanted == 1
    assert [s.seq for s in observer.snapshots] == sorted({s.seq for s in observer.snapshots})
    # A pass at the start, then one a minute at least; a push wakes one at once.
    reports = observer.reports
    assert reports[0].started == START and reports[0].trigger == "start"
    assert all(b.started - a.finished <= 60.0 for a, b in itertools.pairwise(reports))
    assert next(r for r in observer.reports if r.started >= START + 60).trigger == "demand"
    assert next(r for r in observer.reports if r.started >= START + 60).started == START + 60


def test_the_replay_runs_on_a_local_copy_of_the_configuration(tmp_path: Path) -> None:
    text = SITE.replace("daemon:", "terraform: {{backend: pg}}\ndaemon:")
    site = config(tmp_path, text)
    copy = replay_config(site, tmp_path / "replay")
    assert copy.terraform.backend == "local" and copy.state_dir == tmp_path / "replay"
    assert site.terraform.backend == "pg" and site.state_dir == tmp_path / "site"
    run_replay(site, model(Job(START + 60, "cpu", 1, 600.0), hours=1), state_dir=tmp_path / "replay")
    assert not (tmp_path / "site").exists()
    assert (tmp_path / "replay").is_dir()


def test_a_replay_refuses_the_site_state_directory_or_one_not_empty(tmp_path: Path) -> None:
    site = config(tmp_path)
    world = model(hours=1)
    for where in (tmp_path / "site", tmp_path / "site" / "replay"):
        with pytest.raises(UsageError, match="inside the site's state_dir"):
            run_replay(site, world, state_dir=where)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "audit.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="not empty"):
        run_replay(site, world, state_dir=tmp_path / "used")
    assert not (tmp_path / "site").exists()
