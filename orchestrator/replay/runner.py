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
controller, or after it. A loss with an interruption notice is acted on at the notice as the
daemon's notice watch acts (:class:`Noticed`), and its loss recorded before the next pass.

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
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol

from orchestrator import durable
from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostEvent
from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.costs import CostItem, spread_spend, window
from orchestrator.model.facts import FactKind
from orchestrator.model.images import BAKE_NEWEST, with_template_image
from orchestrator.model.instances import new_op_id
from orchestrator.model.notices import DEFAULT_KIND
from orchestrator.ops.executor import OpParts, Wired
from orchestrator.paths import toolkit_root
from orchestrator.reconcile.costs import cost_items
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.loop import Reconciler
from orchestrator.reconcile.noticebook import NoticeBook, NoticedHost
from orchestrator.reconcile.report import PassReport
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import ModelCloud
from orchestrator.replay.controller import ModelController
from orchestrator.replay.engine import ModelEngine
from orchestrator.replay.figures import RunFigures, Sample
from orchestrator.replay.hostcontrol import ReplayFence, ReplayHosts
from orchestrator.replay.model import Job, Loss, WorldModel
from orchestrator.workspace.sharedstore import cluster_documents

# Passes one after another at one instant, each woken by the one before (a guard: the daemon's
# passes take time, the virtual clock's do not unless they create): the next waits for the interval.
MAX_PASSES_AT_ONE_TIME: Final = 50

# The image a ``bake:newest`` template's instances name in a replay (the model cloud has no bakes).
REPLAY_IMAGE: Final = "replay-newest-bake"
# The replay's own join key, in its state directory (first-boot hosts' tokens are minted with it).
JOIN_KEY: Final = "replay-join.key"

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
    for template, on in sorted(config.templates.items()):
        for provider, block in sorted(on.providers.items()):
            if block.select is not None:
                raise UsageError(
                    f"templates.{template}.providers.{provider}.select: a replay cannot read the provider's "
                    "catalogue; list the offerings it selects (xceprov offerings) under offerings:"
                )
            if block.image == BAKE_NEWEST:
                # The model cloud holds no bakes: the newest one is a name (no host boots it).
                config = with_template_image(config, template, provider, REPLAY_IMAGE)
    terraform = config.terraform.model_copy(update={"backend": "local", "pg_conn_file": None})
    # No host of the model reads its user data: the site's controller CA and client identity
    # are neither needed nor read (a candidate replays without the site's secrets); first-boot
    # hosts' join tokens are minted with a throw-away key of the replay's own.
    controller = config.controller.model_copy(
        update={"ca": None, "client_cert": None, "client_key": None, "join_key": Path(state_dir) / JOIN_KEY}
    )
    return config.model_copy(update={"state_dir": Path(state_dir), "terraform": terraform, "controller": controller})


def write_join_key(config: Config) -> None:
    """The throw-away join key a replay's configuration names (:func:`replay_config`), made for
    this replay only in its own state directory (private)."""
    assert config.controller.join_key is not None
    durable.private_dir(config.controller.join_key.parent)
    durable.write_bytes_atomic(config.controller.join_key, secrets.token_hex(32).encode() + b"\n")


def run_replay(
    config: Config,
    model: WorldModel,
    *,
    state_dir: Path,
    seed: int = 0,
    label: str = "replayed",
    samples_every: float = 60.0,
    observe: ReplayObserver | None = None,
    clock: VirtualClock | None = None,
) -> RunFigures:
    """Replay ``model`` under ``config`` (module docstring); ``state_dir``: a fresh directory the
    caller owns, outside the site's state directory (the run's working directories, audit log
    and documents; :func:`replay_config` refuses any other). The same model, config and seed
    give the same figures. ``clock``: the run's virtual clock, for an observer that reads it
    (a flight recorder); it is moved to the model's start."""

    def engine(cloud: ModelCloud, clock: VirtualClock, rng: random.Random) -> Engine:
        return ModelEngine(cloud, model, clock, rng)

    replay = Replay(config, model, state_dir=state_dir, seed=seed, engine=engine, observe=observe, clock=clock)
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
        clock: VirtualClock | None = None,
    ) -> None:
        self.config = replay_config(config, state_dir)
        write_join_key(self.config)
        self.model = model
        self.observe = observe
        self.clock = clock if clock is not None else VirtualClock(model.start)
        self.clock.now = model.start
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
        # Interruption notices as the daemon's notice watch records them (the pass reads them).
        self.notices = NoticeBook(cluster_documents(self.config))
        # Noticed instances the cloud reclaimed, not yet through the loss path: (provider, key, id).
        self.reclaimed: list[tuple[str, str, str]] = []
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
            self._retire_reclaimed()
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

    def _retire_reclaimed(self) -> None:
        """The host-loss path on noticed instances the cloud took, between two passes, as the
        daemon's notice watch runs it (``daemon/noticing.py``): their loss is recorded at once."""
        while self.reclaimed:
            provider, key, instance_id = self.reclaimed.pop(0)
            self.reconciler.executor.observe_losses(provider, [key], new_op_id(self.clock()))
            self.notices.lost([instance_id], self.clock())

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
            noticed = Noticed(controller, self.notices, loss, self.reclaimed)
            if loss.notice > 0:
                controller.at(max(model.start, loss.at - loss.notice), noticed.notice)
            controller.at(loss.at, noticed.lose)
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
        # The ledger says each key's template and whether the cloud made it: a key given back
        # without being made (a create refused for capacity: its keys are closed with a
        # ``returned`` fact) is no return of an instance.
        records = {key: r for fs in facts.values() for key, r in ledger(fs).items()}
        for provider_facts in facts.values():
            for fact in provider_facts:
                name = counted.get(fact.kind)
                record = records.get(fact.instance_key)
                if name is None or fact.committed >= model.end or record is None or record.created is None:
                    continue
                of(record.template)[name] += 1
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
        start, end = self.model.start, self.model.end
        spans = [(*window(item, start, end), item.cost) for item in items]
        spent = spread_spend(spans, [max(t, start) for t, _ in self._demand_samples])
        return [
            Sample(t, demand, bisect.bisect_right(launched, t) - bisect.bisect_right(ended, t), max(0.0, money))
            for (t, demand), money in zip(self._demand_samples, spent, strict=True)
        ]


def _submit(controller: ModelController, job: Job) -> Callable[[float], None]:
    return lambda now: controller.submit(job, now)


class Noticed:
    """One loss, with its interruption notice when it has one: at the notice the instance it
    will take is picked, closed at the controller and written to the notice book the pass reads
    (as the daemon's notice watch writes it: the pass then counts the host as leaving and asks
    for its replacement, ``reconcile/noticebook.py``); at the loss that same instance goes."""

    def __init__(
        self, controller: ModelController, book: NoticeBook, loss: Loss, reclaimed: list[tuple[str, str, str]]
    ) -> None:
        self.controller, self.book, self.loss, self.reclaimed = controller, book, loss, reclaimed
        self.key = ""

    def notice(self, now: float) -> None:
        inst = self.controller.pick(self.loss)
        if inst is None:
            return
        host = self.controller.notice(inst, self.loss.at, now)
        self.key = inst.key
        self.book.record(
            NoticedHost(
                provider=inst.provider,
                instance_id=inst.instance_id,
                kind=DEFAULT_KIND,
                noticed_at=now,
                reclaim_at=self.loss.at,
                acted_at=now,
                instance_key=inst.key,
                template=inst.template,
                host_name=host.host_name if host is not None else "",
                host_state=host.state() if host is not None else "",
                controller_at=now,
            )
        )

    def lose(self, now: float) -> None:
        taken = self.controller.lose(self.loss, now, self.key)
        if taken is not None and self.key and taken.key == self.key:
            self.reclaimed.append((taken.provider, taken.key, taken.instance_id))
