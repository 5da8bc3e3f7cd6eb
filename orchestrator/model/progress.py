"""Progress of long work as typed events, and the board that folds them into counts per phase.

The layers that do the work (``ops``, ``services``, ``clients``) only *report*: they call a
:data:`ProgressSink` with the events below and know nothing of terminals. The command line
renders them (``orchestrator.cli.progress``); the daemon passes no sink. A phase is one kind of
long work of one op (its ``scope``, e.g. ``op op-…``):

* ``plan``: Terraform plans, one unit per planned state (a sharded op plans several);
* ``apply``: instances created or destroyed, one unit per instance;
* ``bootstrap`` / ``decommission``: hosts done or failed, one unit per host.

A phase may be started several times (once per shard, in parallel threads): each start adds its
units to the phase's total. The board is therefore thread-safe.

A play also says which hosts it runs on (``PhaseStarted.hosts``) and when each host starts a
task (:class:`TaskStarted`): :class:`HostBoard` folds those into one :class:`HostLine` per host
(waiting, running which task, its outcome, for how long), for the command line's per-host lines.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

Phase = Literal["plan", "apply", "bootstrap", "decommission"]
HOST_PHASES: tuple[Phase, ...] = ("bootstrap", "decommission")
# Outcomes of a host in a play (the runner's statuses); only the first two count as done.
# "stopped": the play was stopped (a daemon's SIGTERM, a Ctrl-C) before the host finished: not
# bootstrapped, and no failure of the host's either (the next run does it again).
HostOutcome = Literal["ok", "changed", "failed", "unreachable", "skipped", "stopped"]
STOPPED: Final = "stopped"
# "started": a first-boot host at its creation (model/firstboot.py): no play ran, its join decides.
GOOD_HOST_OUTCOMES = frozenset({"ok", "changed", "started"})
InstanceAction = Literal["create", "delete"]


@dataclass(frozen=True)
class PhaseStarted:
    """``total`` more units of ``phase`` of ``scope`` begin (a shard's apply, a play on N hosts).

    ``hosts``: the hosts of a play, when the caller names them (each is ``waiting`` until its
    first task starts)."""

    phase: Phase
    scope: str
    total: int
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhaseEnded:
    """One start of ``phase`` of ``scope`` ended (successfully or not)."""

    phase: Phase
    scope: str


@dataclass(frozen=True)
class PlanDone:
    """One Terraform plan of ``scope`` finished: what it would add, change and remove."""

    scope: str
    add: int
    change: int
    remove: int


@dataclass(frozen=True)
class InstanceDone:
    """Terraform finished (or failed) creating or destroying one instance during an apply."""

    scope: str
    key: str
    name: str
    action: InstanceAction
    ok: bool = True
    reason: str = ""


@dataclass(frozen=True)
class HostDone:
    """A host's outcome in a play (``bootstrap`` or ``decommission``), with the reason when it failed."""

    phase: Phase
    scope: str
    host: str
    outcome: HostOutcome
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when the host ended ``ok`` or ``changed``."""
        return self.outcome in GOOD_HOST_OUTCOMES


@dataclass(frozen=True)
class TaskStarted:
    """One host started one task of a play (its current task, for the per-host lines)."""

    host: str
    task: str


@dataclass(frozen=True)
class TaskDone:
    """One task finished on one host (detail: shown only with ``-v``)."""

    host: str
    task: str
    status: str  # ok, changed, failed, unreachable, skipped


ProgressEvent = PhaseStarted | PhaseEnded | PlanDone | InstanceDone | HostDone | TaskStarted | TaskDone
ProgressSink = Callable[[ProgressEvent], None]


def no_progress(event: ProgressEvent) -> None:
    """The sink that drops every event (what callers without a display pass)."""
    del event


@contextlib.contextmanager
def reported_phase(
    sink: ProgressSink, phase: Phase, scope: str, total: int, hosts: Sequence[str] = ()
) -> Iterator[None]:
    """``PhaseStarted`` (naming ``hosts``) before the block and ``PhaseEnded`` after it, even when it raises."""
    sink(PhaseStarted(phase, scope, total, tuple(hosts)))
    try:
        yield
    finally:
        sink(PhaseEnded(phase, scope))


def phase_key(event: ProgressEvent) -> tuple[Phase, str] | None:
    """The (phase, scope) an event counts toward; None for a per-task event."""
    if isinstance(event, PhaseStarted | PhaseEnded | HostDone):
        return event.phase, event.scope
    if isinstance(event, PlanDone):
        return "plan", event.scope
    if isinstance(event, InstanceDone):
        return "apply", event.scope
    return None


@dataclass
class PhaseCount:
    """The counts of one phase of one scope."""

    phase: Phase
    scope: str
    total: int = 0
    done: int = 0  # units finished well: plans made, instances created/destroyed, hosts ok
    failed: int = 0
    starts: int = 0
    ends: int = 0
    created: int = 0
    destroyed: int = 0
    planned: tuple[int, int, int] = (0, 0, 0)  # add, change, remove over the plans made

    @property
    def running(self) -> bool:
        """True while a start of this phase has not ended."""
        return self.ends < self.starts

    def describe(self) -> str:
        """One line: ``apply op op-1: 3/4 created, 1 failed``."""
        head = f"{self.phase} {self.scope}".rstrip()
        failed = f", {self.failed} failed" if self.failed else ""
        if self.phase == "plan":
            add, change, remove = self.planned
            return f"{head}: {self.done}/{self.total} planned (+{add} ~{change} -{remove}){failed}"
        if self.phase == "apply":
            if self.created and self.destroyed:
                what = f"instances ({self.created} created, {self.destroyed} destroyed)"
            else:
                what = "created" if self.created else "destroyed" if self.destroyed else "instances"
            return f"{head}: {self.done}/{self.total} {what}{failed}"
        return f"{head}: {self.done}/{self.total} hosts done{failed}"


@dataclass(frozen=True)
class UnitOutcome:
    """The last word on one instance or host: for the one line per host at the end."""

    name: str
    phase: Phase
    outcome: str  # created, destroyed, failed (apply) or a host outcome
    ok: bool
    reason: str = ""

    def describe(self) -> str:
        """``name  outcome  reason`` (the phase is named when it failed)."""
        what = self.outcome if self.ok else f"{self.phase} {self.outcome}"
        return f"{self.name}  {what}" + (f"  {self.reason}" if self.reason else "")


@dataclass
class ProgressBoard:
    """Folds :data:`ProgressEvent` values into :class:`PhaseCount` per (phase, scope) and outcomes per host.

    Call it as a sink. ``tasks`` counts the per-task events it saw (they are not kept).
    """

    phases: dict[tuple[Phase, str], PhaseCount] = field(default_factory=dict)
    units: dict[str, UnitOutcome] = field(default_factory=dict)
    tasks: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, event: ProgressEvent) -> None:
        """Fold one event in (from any thread)."""
        with self._lock:
            self._fold(event)

    def _count(self, phase: Phase, scope: str) -> PhaseCount:
        key = (phase, scope)
        if key not in self.phases:
            self.phases[key] = PhaseCount(phase, scope)
        return self.phases[key]

    def _fold(self, event: ProgressEvent) -> None:
        if isinstance(event, TaskStarted):
            return
        if isinstance(event, TaskDone):
            self.tasks += 1
        elif isinstance(event, PhaseStarted):
            count = self._count(event.phase, event.scope)
            count.total += event.total
            count.starts += 1
        elif isinstance(event, PhaseEnded):
            self._count(event.phase, event.scope).ends += 1
        elif isinstance(event, PlanDone):
            count = self._count("plan", event.scope)
            count.done += 1
            add, change, remove = count.planned
            count.planned = (add + event.add, change + event.change, remove + event.remove)
        elif isinstance(event, InstanceDone):
            self._instance(event)
        else:
            self._host(event)

    def _instance(self, event: InstanceDone) -> None:
        count = self._count("apply", event.scope)
        name = event.name or event.key
        if not event.ok:
            count.failed += 1
            self.units[name] = UnitOutcome(name, "apply", "failed", False, event.reason)
            return
        count.done += 1
        outcome = "created" if event.action == "create" else "destroyed"
        if event.action == "create":
            count.created += 1
        else:
            count.destroyed += 1
        self.units[name] = UnitOutcome(name, "apply", outcome, True)

    def _host(self, event: HostDone) -> None:
        count = self._count(event.phase, event.scope)
        if event.ok:
            count.done += 1
        else:
            count.failed += 1
        self.units[event.host] = UnitOutcome(event.host, event.phase, event.outcome, event.ok, event.reason)

    # -- reading (a snapshot under the lock, for a display thread) ---------------------------------

    def count(self, phase: Phase, scope: str) -> PhaseCount | None:
        """A copy of the counts of ``phase`` of ``scope``, if it was seen."""
        with self._lock:
            found = self.phases.get((phase, scope))
            return replace(found) if found is not None else None

    def snapshot(self) -> list[PhaseCount]:
        """Copies of the phase counts, in the order the phases were first seen."""
        with self._lock:
            return [replace(c) for c in self.phases.values()]

    def outcomes(self) -> list[UnitOutcome]:
        """The last outcome of every instance and host, by name."""
        with self._lock:
            return sorted(self.units.values(), key=lambda u: u.name)

    def failed(self) -> list[UnitOutcome]:
        """The instances and hosts whose last outcome is a failure, by name."""
        return [u for u in self.outcomes() if not u.ok]


# A host's state in a play: named before its first task, while it runs, then its outcome.
HostState = Literal["waiting", "running", "ok", "changed", "failed", "unreachable", "skipped", "stopped"]


@dataclass(frozen=True)
class HostLine:
    """One host of a play: its state, its current (or failing) task, and since when it is in the play.

    ``since`` and ``ended`` are the board clock's readings (``ended`` None while not finished).
    Host names, tasks and reasons are someone else's text: printers pass them through ``printable``.
    """

    host: str
    phase: Phase
    scope: str
    state: HostState
    task: str = ""
    reason: str = ""
    since: float = 0.0
    ended: float | None = None

    @property
    def done(self) -> bool:
        """The host's outcome is final."""
        return self.state not in ("waiting", "running")

    def elapsed(self, now: float) -> float:
        """Seconds in the play: up to ``now`` while it runs, up to its outcome after."""
        return max(0.0, (self.ended if self.ended is not None else now) - self.since)


@dataclass
class HostBoard:
    """Folds play events into one :class:`HostLine` per host (thread-safe; call it as a sink).

    Calling it returns the host's new line when the event changed a host's *state* (waiting,
    running, an outcome), else None: a plain-text printer prints exactly those. A task start
    changes the current task without a new state; a failed task's name stays on the line.
    """

    clock: Callable[[], float]
    lines: dict[str, HostLine] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, event: ProgressEvent) -> list[HostLine]:
        """Fold ``event`` in; the lines whose state it changed (usually none or one)."""
        with self._lock:
            return self._fold(event)

    def _fold(self, event: ProgressEvent) -> list[HostLine]:
        now = self.clock()
        if isinstance(event, PhaseStarted):
            fresh = [HostLine(h, event.phase, event.scope, "waiting", since=now) for h in event.hosts]
            self.lines.update((f.host, f) for f in fresh)
            return fresh
        if not isinstance(event, TaskStarted | HostDone):
            return []  # (a task's end changes nothing shown: the task stays until the next starts)
        old = self.lines.get(event.host)
        if old is None or old.done:  # a host no play named is not on the board
            return []
        if isinstance(event, TaskStarted):
            self.lines[event.host] = replace(old, state="running", task=event.task)
            return [self.lines[event.host]] if old.state == "waiting" else []
        task = _failed_task(event.reason) or (old.task if event.outcome in _FAILED else "")
        self.lines[event.host] = replace(old, state=event.outcome, task=task, reason=event.reason, ended=now)
        return [self.lines[event.host]]

    def snapshot(self) -> list[HostLine]:
        """The lines, in the order the hosts were first seen."""
        with self._lock:
            return list(self.lines.values())


_FAILED = frozenset({"failed", "unreachable"})


def _failed_task(reason: str) -> str:
    """The task a ``HostDone`` reason names (``at task 'NAME': why``), else ""."""
    head = "at task '"
    if not reason.startswith(head):
        return ""
    end = reason.find("': ", len(head))
    return reason[len(head) : end] if end > 0 else ""
