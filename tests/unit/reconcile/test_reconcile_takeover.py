"""A lease gained while a pass runs (a takeover) is resumed at once on a thread of its own, beside
the pass: not after the unit of work in flight (here a long create of this daemon's own), the
pass never touching the provider while its resume runs, a stop waiting for it, its failures
reported as a failed resume phase.

The scripted engine blocks on events, never on time: a test that goes wrong fails on a wait's
bound (30 s), it does not pass by luck of the machine's speed.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reconcile_support import FakeClock
from tffake import SITE, FakeEngine, FakeFence, FakeHosts, MemoryFacts, unit_ops

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon.guarded import held_unless_stopping
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.executor import Created
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.beside import Hold, no_hold
from orchestrator.reconcile.loop import PassReport, PhaseOutcome, Reconciler
from tests.unit.reconcile.test_reconcile_loop import FakeView

TAKEN = "sim2"  # the provider another daemon held; its lease comes during this daemon's pass
TAKEN_OP = "op-6b49d200-0123456789ab"
BOUND = 30.0  # the longest a scripted step waits for the other thread: only reached when broken
POLL = 0.01  # the pass looks for a gained lease this often (the daemon's default is GAIN_POLL)


def two_providers(tmp_path: Path, sim_max: int = 10) -> LoadedConfig:
    """The unit site with a second provider, ``sim`` first by priority (ties go by name)."""
    text = SITE.format(cluster="unit", state=tmp_path / "state")
    text = text.replace(
        "  sim: {module: xcesim, max_instances: 10}\n",
        f"  sim: {{module: xcesim, max_instances: {sim_max}}}\n  {TAKEN}: {{module: xcesim, max_instances: 10}}\n",
    )
    text = text.replace(
        "      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}\n",
        "      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}\n"
        f"      {TAKEN}: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}\n",
    )
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


class TakenLater(FakeFence):
    """``sim`` held throughout; ``sim2`` not held until :meth:`grant` (or, with ``after_read``,
    from the first look after the pass's read)."""

    def __init__(self, after_read: bool = False) -> None:
        super().__init__()
        self.taken = threading.Event()
        self.after_read = after_read

    def grant(self) -> None:
        self.taken.set()

    def gate(self, provider: str) -> Epoch:
        if provider == TAKEN and not self.taken.is_set():
            raise LeaseLost(f"no lease for provider {provider!r}")
        return self.epoch

    def valid(self, provider: str) -> bool:
        if provider != TAKEN:
            return True
        held = self.taken.is_set()
        if self.after_read:
            self.taken.set()  # the read's look says no; the grant lands right after it
        return held


class Signalling(MemoryFacts):
    """Facts that say when the taken provider's resume committed its instance."""

    def __init__(self) -> None:
        super().__init__()
        self.taken_created = threading.Event()

    def commit(self, fact: Fact) -> None:
        super().commit(fact)
        if fact.provider == TAKEN and fact.kind == FactKind.INSTANCE_CREATED:
            self.taken_created.set()


class Site:
    """A reconciler over two providers, the previous holder's op left open on ``sim2``."""

    def __init__(self, loaded: LoadedConfig, fence: TakenLater, hold: Hold = no_hold, bootstrap: object = None) -> None:
        self.loaded, self.fence = loaded, fence
        self.engine, self.facts, self.hosts, self.clock = FakeEngine(), Signalling(), FakeHosts(), FakeClock()
        self.ops = unit_ops(
            loaded, self.engine, facts=self.facts, hosts=self.hosts, fence=fence, clock=lambda: self.clock.now
        )
        self.view = FakeView(self.facts, self.hosts)
        self.reconciler = Reconciler(
            loaded.config,
            self.ops,
            self.view,
            clock=lambda: self.clock.now,
            state_dir=loaded.config.state_dir,
            bootstrap=bootstrap,  # type: ignore[arg-type]
            hold=hold,
            gain_poll=POLL,
        )
        was = fence.taken.is_set()
        fence.taken.set()
        self.ops.executor.place(TAKEN, "cpu", 1, TAKEN_OP)  # the previous holder's op: intent and desired set
        if not was:
            fence.taken.clear()

    def taken_open(self) -> list[str]:
        return [o.op_id for o in open_ops(self.facts.facts(TAKEN))]

    def applies(self, provider: str) -> int:
        return sum(1 for verb, path in self.engine.calls if verb == "apply" and path.name == provider)

    def audit(self) -> list[dict[str, object]]:
        path = self.loaded.config.state_dir / "audit.log"
        return [json.loads(line) for line in path.read_text().splitlines()]


def gained(report: PassReport) -> list[PhaseOutcome]:
    """The resume phases of leases gained during the pass."""
    return [p for p in report.phases if p.name == "resume" and list(getattr(p.evidence, "gained", ())) == [TAKEN]]


def test_a_lease_gained_during_a_long_create_is_resumed_before_that_create_ends(tmp_path: Path) -> None:
    fence = TakenLater()
    site = Site(two_providers(tmp_path), fence)
    seen_in_flight: list[bool] = []

    def during_apply(workdir: Path) -> None:
        if workdir.name == "sim":  # this daemon's own create: long, the lease of sim2 comes meanwhile
            fence.grant()
            seen_in_flight.append(site.facts.taken_created.wait(BOUND))

    site.engine.during_apply = during_apply
    site.view.want(cpu=3)  # the taken op's host is on its way: two more, on sim (sim2 not leased)
    report = site.reconciler.run_once("demand")
    # The previous holder's op was completed while this daemon's create was still applying.
    assert seen_in_flight == [True]
    assert site.taken_open() == []
    [resume] = gained(report)
    assert resume.ok and [r.op for r in resume.evidence.resumed] == [TAKEN_OP]
    assert [c.provider for c in report.phase("scale-out").evidence.created] == ["sim"]
    assert report.leased == ["sim", TAKEN]  # joined once its resume ended


def test_the_pass_never_acts_on_a_provider_while_its_resume_runs(tmp_path: Path) -> None:
    fence = TakenLater(after_read=True)
    applying, release = threading.Event(), threading.Event()
    booted: list[tuple[str, bool]] = []

    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        # The pass's later phase, while sim2's resume is applying: sim2 is not the pass's.
        booted.append((provider, applying.wait(BOUND)))
        release.set()
        return {c.name: "ok" for c in created}

    site = Site(two_providers(tmp_path, sim_max=1), fence, bootstrap=bootstrap)

    def during_apply(workdir: Path) -> None:
        if workdir.name == TAKEN:
            applying.set()
            release.wait(BOUND)  # the resume holds sim2 until the pass has been through its bootstrap

    site.engine.during_apply = during_apply
    site.view.want(cpu=4)  # the taken op's 1 on its way; sim has room for 1; sim2 could take 2
    report = site.reconciler.run_once("demand")
    # The resume began right after the read and ended after the bootstrap: the scale-out and the
    # bootstrap ran while it did, and neither acted on sim2.
    assert release.is_set() and booted == [("sim", True)]
    scale_out = report.phase("scale-out").evidence
    assert [(c.provider, c.count) for c in scale_out.created] == [("sim", 1)]
    assert site.applies(TAKEN) == 1 and site.taken_open() == []
    assert report.leased == ["sim", TAKEN]
    # The next pass holds sim2 from its read: the rest of the demand goes there now.
    release.set()
    following = site.reconciler.run_once("interval")
    assert [(c.provider, c.count) for c in following.phase("scale-out").evidence.created] == [(TAKEN, 2)]
    assert gained(following) == []


def test_a_stop_during_a_resume_waits_for_it_and_a_resume_asked_after_a_stop_is_not_started(tmp_path: Path) -> None:
    loaded = two_providers(tmp_path)
    lifecycle = Lifecycle(loaded, lambda: loaded)
    fence = TakenLater(after_read=True)
    site = Site(loaded, fence, hold=partial(held_unless_stopping, lifecycle))
    applying, release = threading.Event(), threading.Event()

    def during_apply(workdir: Path) -> None:
        if workdir.name == TAKEN:
            applying.set()
            release.wait(BOUND)

    site.engine.during_apply = during_apply
    site.view.want(cpu=1)
    reports: list[PassReport] = []
    passing = threading.Thread(target=lambda: reports.append(site.reconciler.run_once("demand")))
    passing.start()
    assert applying.wait(BOUND)
    lifecycle.request_stop("SIGTERM")
    codes: list[int] = []
    stopped = threading.Event()
    threading.Thread(target=lambda: (codes.append(lifecycle.shutdown()), stopped.set())).start()
    assert not stopped.wait(0.3)  # the stop waits for the resume in flight
    release.set()
    assert stopped.wait(BOUND) and codes == [0]  # it finished within the bound: nothing left running
    passing.join(BOUND)
    [resume] = gained(reports[0])
    assert resume.ok and site.taken_open() == []  # the apply it had begun ran to its end

    # A lease gained once the daemon is stopping: its resume is not started, the op stays open.
    again = Site(
        two_providers(tmp_path / "again"), TakenLater(after_read=True), hold=partial(held_unless_stopping, lifecycle)
    )
    again.view.want(cpu=0)
    report = again.reconciler.run_once("demand")
    [refused] = gained(report)
    assert refused.ok and refused.skipped.startswith("not started: not starting resume of sim2: the daemon is stopping")
    assert again.taken_open() == [TAKEN_OP] and again.applies(TAKEN) == 0
    assert report.leased == ["sim"]


class Raising(FakeView):
    """The controller's facts of sim2 cannot be read once the pass has read its inputs."""

    def __init__(self, facts: MemoryFacts, hosts: FakeHosts) -> None:
        super().__init__(facts, hosts)
        self.reads = 0

    def facts(self, provider: str) -> list[Fact]:
        if provider == TAKEN:
            self.reads += 1
            if self.reads > 1:
                raise RuntimeError("queryFacts of sim2: connection reset")
        return super().facts(provider)


def test_an_exception_in_the_resume_thread_is_reported_as_a_failed_resume_phase(tmp_path: Path) -> None:
    site = Site(two_providers(tmp_path), TakenLater(after_read=True))
    site.reconciler.controller = site.view = Raising(site.facts, site.hosts)
    site.view.want(cpu=1)
    report = site.reconciler.run_once("demand")
    [failed] = gained(report)
    assert not failed.ok and failed.error == "RuntimeError: queryFacts of sim2: connection reset"
    assert not report.ok and site.taken_open() == [TAKEN_OP]
    assert report.leased == ["sim"]  # not joined: the next pass, leased from its read, resumes it in full
    assert any(e["action"] == "phase-failed" and e["phase"] == "resume" for e in site.audit())

    # One that escapes the phase itself (here its hold) is reported the same way, not lost.
    @contextmanager
    def broken(_name: str) -> Iterator[None]:
        raise OSError("in-flight table unavailable")
        yield

    hold: Hold = broken
    other = Site(two_providers(tmp_path / "other"), TakenLater(after_read=True), hold=hold)
    other.view.want(cpu=0)
    report = other.reconciler.run_once("demand")
    [escaped] = gained(report)
    assert not escaped.ok and escaped.error == "OSError: in-flight table unavailable"
    assert report.leased == ["sim"] and other.taken_open() == [TAKEN_OP]
    assert any(e["action"] == "phase-failed" and e.get("provider") == TAKEN for e in other.audit())
