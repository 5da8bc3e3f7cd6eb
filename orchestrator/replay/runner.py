"""Run a replay: the real reconcile pass, on the virtual clock, against the model world.

:func:`run_replay` builds the daemon's parts as the daemon does, with three stand-ins for the
outside world: the :class:`~orchestrator.replay.engine.ModelEngine` as every provider's
Terraform engine (over one :class:`~orchestrator.replay.cloud.ModelCloud`), the
:class:`~orchestrator.replay.controller.ModelController` as the controller (view, fact log, host
control) and :class:`~orchestrator.replay.controller.ReplayFence` as the leases. Then the real
:class:`~orchestrator.reconcile.loop.Reconciler` runs passes from the model's start to its end.

Safety: the replay never touches the site's cloud, controller, state or shared store. It runs on
a copy of the configuration whose ``state_dir`` is the caller's (a fresh directory) and whose
Terraform backend is ``local``; every Terraform call goes to the model engine; no bootstrap or
decommission play runs (hosts join by themselves after their drawn join latency).

When passes run (the daemon's loop, ``daemon/service.py`` and ``daemon/wakeups.py``): a pass at
the start; after each pass the next one comes when the controller pushes a new demand picture or
a host event (the daemon wakes on either; one that came during the pass starts the next pass as
soon as it ended), else ``daemon.reconcile_interval`` after the pass ended. The model world's
events (job submits, joins, work ends, losses) run in time order at their own times, those that
fell within a pass (the engine moves the clock while it applies) as soon as the pass reads the
controller, or after it.

What a run comes to (:class:`~orchestrator.replay.figures.RunFigures`): cost and host-hours from
the real cost ledger (``reconcile/costs.cost_items`` over the replay's facts, priced by the
configuration; host-hours count running time, not a warm pool's stopped time); launches, returns
and losses from the facts committed before the model's end; pending host-minutes from the
controller's own integral of its pending hosts. Samples: demand (pending + busy hosts) as the
controller has it at each sample time; supply (instances live in the model cloud) and spend
(money spent since the start, each instance's cost spread evenly over its stretch in the window)
from the run's end state.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostEvent
from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.costs import CostItem
from orchestrator.model.facts import FactKind
from orchestrator.ops.executor import OpParts, Wired
from orchestrator.paths import toolkit_root
from orchestrator.reconcile.costs import cost_items
from orchestrator.reconcile.loop import Reconciler
from orchestrator.reconcile.report import PassReport
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import ModelCloud
from orchestrator.replay.controller import ModelController
from orchestrator.replay.engine import ModelEngine
from orchestrator.replay.figures import RunFigures, Sample
from orchestrator.replay.hostcontrol import ReplayFence, ReplayHosts
from orchestrator.replay.model import Job, Loss, WorldModel

# Passes one after another at one instant, each woken by the one before (a guard: the daemon's
# passes take time, the virtual clock's do not unless they create): the next waits for the interval.
MAX_PASSES_AT_ONE_TIME: Final = 50

# Builds the model engine of a run from its cloud, clock and random generator.
EngineFactory = Callable[[ModelCloud, VirtualClock, random.Random], Engine]


class ReplayObserver(Protocol):
    """What watches a replay as the daemon's flight recorder watches the daemon
    (``daemon/flightrecorder.py``'s methods): called where the daemon calls them."""

    def demand(self, snapshot: DemandSnapshot) -> None:
        """A demand snapshot the controller pushed."""
        ...

    def host_event(self, event: HostEvent) -> None:
        """A host event from the controller."""
        ...

    def facts(self, facts: Sequence[Fact]) -> None:
        """Facts an op committed."""
        ...

    def after_pass(self, report: PassReport) -> None:
        """A pass ended."""
        ...


def replay_config(config: Config, state_dir: Path) -> Config:
    """``config`` for a replay: its state under ``state_dir``, Terraform's backend local (no
    shared store is ever opened, so no other orchestrator's documents are read or written).

    ``UsageError`` when ``state_dir`` is the site's own state directory or lies in it (the
    pass writes breakers, bootstrap records and notices there), or is not empty (what an earlier
    run left there would carry over into this one)."""
    site, mine = Path(config.state_dir).resolve(), Path(state_dir).resolve()
    if mine == site or site in mine.parents:
        raise UsageError(
            f"replay state directory {state_dir}: inside the site's state_dir {config.state_dir}; "
            "give a fresh directory elsewhere"
        )
    if mine.is_dir() and any(mine.iterdir()):
        raise UsageError(f"replay state directory {state_dir}: not empty; give a fresh directory")
    terraform = config.terraform.model_copy(update={"backend": "local", "pg_conn_file": None})
    return config.model_copy(update={"state_dir": Path(state_dir), "terraform": terraform})


def run_replay(
    config: Config,
    model: WorldModel,
    *,
    state_dir: Path,
    seed: int = 0,
    label: str = "replayed",
    samples_every: float = 60.0,
    observe: ReplayObserver | None = None,
) -> RunFigures:
    """Replay ``model`` under ``config`` (module docstring); ``state_dir``: a fresh directory the
    caller owns, outside the site's state directory (the run's working directories, audit log
    and documents; :func:`replay_config` refuses any other). The same model, config and seed
    give the same figures."""

    def engine(cloud: ModelCloud, clock: VirtualClock, rng: random.Random) -> Engine:
        return ModelEngine(cloud, model, clock, rng)

    replay = Replay(config, model, state_dir=state_dir, seed=seed, engine=engine, observe=observe)
    return replay.run(label=label, samples_every=samples_every)


class Replay:
    """One run: the parts, the passes, the figures (:func:`run_replay` builds one)."""

    def __init__(
        self,
        config: Config,
        model: WorldModel,
        *,
        state_dir: Path,
        seed: int,
        engine: EngineFactory,
        observe: ReplayObserver | None = None,
    ) -> None:
        self.config = replay_config(config, state_dir)
        self.model = model
        self.observe = observe
        self.clock = VirtualClock(model.start)
        self.cloud = ModelCloud()
        self.controller = ModelController(
            self.clock,
            self.cloud,
            model.latencies,
            random.Random(f"replay-controller-{seed}"),
            window=(model.start, model.end),
        )
        if observe is not None:
            self.controller.on_demand = observe.demand
            self.controller.on_host_event = observe.host_event
            self.controller.on_facts = observe.facts
        self.engine = engine(self.cloud, self.clock, random.Random(f"replay-engine-{seed}"))
        parts = OpParts(
            self.config,
            toolkit_root(),
            self.engine,
            ReplayFence(),
            self.controller,
            ReplayHosts(self.controller),
            clock=self.clock,
            sleep=self.clock.sleep,
        )
        self.reconciler = Reconciler(
            self.config,
            Wired.of(parts),
            self.controller,
            clock=self.clock,
            state_dir=self.config.state_dir,
            rng=random.Random(seed),
            bootstrap=None,
        )
        self.passes = 0
        self._demand_samples: list[tuple[float, int]] = []

    # -- the run ---------------------------------------------------------------------------------

    def run(self, label: str = "replayed", samples_every: float = 60.0) -> RunFigures:
        """Every pass from the model's start to its end; the figures of the run."""
        self._schedule(samples_every)
        model, controller = self.model, self.controller
        trigger, at = "start", model.start
        same_time = 0
        while at < model.end:
            self.clock.to(at)
            controller.catch_up()
            seen, seq = controller.pushes, controller.picture_seq()
            report = self.reconciler.run_once(trigger)
            self.passes += 1
            if self.observe is not None:
                self.observe.after_pass(report)
            controller.catch_up()  # what happened while the pass ran
            ended = self.clock.now
            same_time = same_time + 1 if ended == at else 0
            if controller.pushes != seen and same_time < MAX_PASSES_AT_ONE_TIME:
                trigger, at = ("demand" if controller.picture_seq() != seq else "host-event"), ended
                continue
            trigger, at = self._wait(ended + self.config.daemon.reconcile_interval)
        self.clock.to(model.end)
        controller.catch_up()
        return self._figures(label)

    def _wait(self, deadline: float) -> tuple[str, float]:
        """Run the model's events up to the first push (the next pass's trigger and time), else
        up to ``deadline`` (``interval``)."""
        controller = self.controller
        seen, seq = controller.pushes, controller.picture_seq()
        while True:
            when = controller.step(min(deadline, self.model.end))
            if when is None:
                return "interval", deadline
            if controller.pushes != seen:
                return ("demand" if controller.picture_seq() != seq else "host-event"), when

    def _schedule(self, samples_every: float) -> None:
        """The model's events and the sample times as the controller's timers."""
        model, controller = self.model, self.controller
        for job in model.jobs:
            controller.at(max(job.submit, model.start), _submit(controller, job))
        for loss in model.losses:
            controller.at(loss.at, _lose(controller, loss))
        if samples_every > 0:
            t = model.start
            while t < model.end:
                controller.at(t, self._sample)
                t += samples_every

    def _sample(self, now: float) -> None:
        picture = self.controller.picture()
        self._demand_samples.append((now, sum(d.pending_hosts + d.busy for d in picture)))

    # -- figures ---------------------------------------------------------------------------------

    def _figures(self, label: str) -> RunFigures:
        model = self.model
        every = self.controller.all_facts()  # not only what the pass reads now
        facts = {p: every.get(p, []) for p in sorted(self.config.providers)}
        items = cost_items(self.config, facts, model.start, model.end)
        templates: dict[str, dict[str, float]] = {}

        def of(template: str) -> dict[str, float]:
            return templates.setdefault(
                template,
                {"cost": 0.0, "host_hours": 0.0, "launches": 0, "returns": 0, "lost": 0, "pending_host_minutes": 0.0},
            )

        for item in items:
            row = of(item.template)
            row["cost"] += item.cost
            row["host_hours"] += item.running_seconds / 3600
        counted = {FactKind.INSTANCE_CREATED: "launches", FactKind.RETURNED: "returns", FactKind.LOST: "lost"}
        template_of = _templates_by_key(facts)
        for provider_facts in facts.values():
            for fact in provider_facts:
                name = counted.get(fact.kind)
                if name is not None and fact.committed < model.end:
                    of(fact.template or template_of.get(fact.instance_key, ""))[name] += 1
        for template, seconds in self.controller.pending_seconds.items():
            of(template)["pending_host_minutes"] += seconds / 60
        total = {k: sum(row[k] for row in templates.values()) for k in ("cost", "host_hours", "pending_host_minutes")}
        counts = {k: int(sum(row[k] for row in templates.values())) for k in ("launches", "returns", "lost")}
        for row in templates.values():
            for k in ("launches", "returns", "lost"):
                row[k] = int(row[k])
        return RunFigures(
            label=label,
            start=model.start,
            end=model.end,
            cost=total["cost"],
            host_hours=total["host_hours"],
            pending_host_minutes=total["pending_host_minutes"],
            launches=counts["launches"],
            returns=counts["returns"],
            lost=counts["lost"],
            by_template=templates,
            samples=self._samples(items),
        )

    def _samples(self, items: Sequence[CostItem]) -> list[Sample]:
        """Demand as sampled; supply and spend at each sample time from the run's end state."""
        launched = sorted(i.launched for i in self.cloud.instances.values())
        ended = sorted(i.ended for i in self.cloud.instances.values() if i.ended is not None)
        spend = _spend_curve(items, self.model.start, self.model.end)
        return [
            Sample(t, demand, bisect.bisect_right(launched, t) - bisect.bisect_right(ended, t), spend(t))
            for t, demand in self._demand_samples
        ]


def _submit(controller: ModelController, job: Job) -> Callable[[float], None]:
    return lambda now: controller.submit(job, now)


def _lose(controller: ModelController, loss: Loss) -> Callable[[float], None]:
    def lose(now: float) -> None:
        controller.lose(loss, now)

    return lose


def _templates_by_key(facts: Mapping[str, Sequence[Fact]]) -> dict[str, str]:
    """Instance key → its template, from any fact that names both."""
    out: dict[str, str] = {}
    for provider_facts in facts.values():
        for fact in provider_facts:
            if fact.instance_key and fact.template:
                out.setdefault(fact.instance_key, fact.template)
    return out


def _spend_curve(items: Sequence[CostItem], since: float, until: float) -> Callable[[float], float]:
    """Money spent in ``[since, t)``: each item's cost spread evenly over its stretch in the
    window (exact for an instance at one price; a warm-pool instance's stopped and running
    stretches are averaged). Reads ``t`` in increasing order only."""
    changes: list[tuple[float, float]] = []
    for item in items:
        start, end = max(item.start, since), min(item.end if item.end is not None else until, until)
        if end > start and item.cost:
            rate = item.cost / (end - start)
            changes += [(start, rate), (end, -rate)]
    changes.sort()
    state = {"i": 0, "t": since, "rate": 0.0, "spent": 0.0}

    def spend(t: float) -> float:
        i, last, rate, spent = int(state["i"]), state["t"], state["rate"], state["spent"]
        while i < len(changes) and changes[i][0] <= t:
            when, delta = changes[i]
            spent += rate * (when - last)
            last, rate = when, rate + delta
            i += 1
        spent += rate * (t - last)
        state.update(i=i, t=t, rate=rate, spent=spent)
        return max(0.0, spent)

    return spend
