"""The jobs of a flight recording, inferred (docs/replay.md, "From a recording").

A recording holds no jobs: the controller's demand snapshots say how many hosts' worth of work
was pending per template, and its host events say when each host went busy and idle. The work
is inferred from both:

* each host's busy interval (``busy`` until ``idle``/``idleSince``, ``closed``,
  ``decommissioned``, ``lost``, ``interruptionNotice`` or ``returned``) is one host of work of that duration; the
  intervals of one template that began and ended at the same millisecond are one job of that
  many hosts (the controller starts and ends a job's hosts together);
* submissions are the increases of ``pending`` per template between demand records (the first
  demand record's ``pending`` counts as submitted at its time); work runs first in, first out,
  so the last demand record's ``pending`` are the latest submissions (still pending at the end)
  and the others are matched to the jobs in start order: a job takes the oldest unmatched
  submissions (one per host) at or before its start (:data:`MATCH_SLACK` allowed: the demand
  record's time is when the daemon received it, the busy event's the controller's) and was
  submitted at the first; one with none was submitted when it started (the controller started
  it at once: it was never pending);
* a host busy at the first demand record (``busy`` counts there) and idle before any ``busy``
  event of its own ran from the recording's start, submitted then;
* a busy interval still open at the end ran at least until the end: the longer of that and its
  template's mean duration;
* work still pending at the end runs for its template's mean duration (:data:`DEFAULT_DURATION`
  when the template ran nothing); submissions matched to nothing (work cancelled) are dropped
  and counted.

Two one-host jobs that start and end at the same millisecond are taken for one two-host job;
work still pending at the end is one-host jobs (a rise of ``pending`` by two may be one job or
two). Pure: records in, jobs out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from orchestrator.model.recording import DEMAND, HOST, Record
from orchestrator.replay.model import Job

# Seconds a submission may come after the start it is matched to (the demand record's time is
# the daemon's, the busy event's the controller's).
MATCH_SLACK: Final = 1.0
# Hosts of one template busy from the same instant to the same instant (to this many seconds:
# the controller's times are in milliseconds) ran one job: it starts and ends a job's hosts together.
GANG_SLACK: Final = 0.001
# The duration of work pending at the end of a template that ran nothing in the recording.
DEFAULT_DURATION: Final = 600.0
BUSY: Final = "busy"
# Host events that end a busy interval (the controller's and the op facts' ``returned``/``lost``;
# at an ``interruptionNotice`` the controller checkpoints or requeues the host's work).
ENDS: Final = frozenset({"idle", "idleSince", "closed", "decommissioned", "lost", "returned", "interruptionNotice"})
# Events after which a host with no busy event of its own was idle (it ran work from the start);
# ``closed`` only after ``closing`` (an idle host is closed at once, a busy one closing first).
IDLE_AFTER_WORK: Final = frozenset({"idle", "idleSince"})
CLOSING: Final = "closing"
# Events that show a host was not running work from the start (``closing`` and a notice do not).
FRESH: Final = frozenset({"expected", "joined", BUSY, *ENDS})


@dataclass(frozen=True)
class Interval:
    """One host busy from ``start`` to ``end`` (None: still busy at the end) on ``template``."""

    host: str
    template: str
    start: float
    end: float | None
    from_start: bool = False  # busy already when the recording began


@dataclass(frozen=True)
class Inference:
    """The jobs inferred and how they were found (``xceprov replay`` may print the counts)."""

    jobs: tuple[Job, ...]
    intervals: tuple[Interval, ...] = ()
    matched: int = 0  # jobs matched to a pending increase
    unmatched: int = 0  # jobs submitted when they started
    running_at_start: int = 0
    running_at_end: int = 0
    pending_at_end: int = 0
    dropped: int = 0  # pending increases matched to nothing, not pending at the end
    skipped: int = 0  # busy intervals of a host whose template is unknown
    means: Mapping[str, float] = field(default_factory=dict)


def _key_names(records: Iterable[Record]) -> dict[str, str]:
    """Instance key → host name, from every host record naming both."""
    out: dict[str, str] = {}
    for r in records:
        key, host = r.data.get("key"), r.data.get("host")
        if r.kind == HOST and isinstance(key, str) and key and isinstance(host, str) and host:
            out.setdefault(key, host)
    return out


def _host_of(data: Mapping[str, Any], names: Mapping[str, str]) -> str:
    host = data.get("host")
    if isinstance(host, str) and host:
        return host
    key = data.get("key")
    if isinstance(key, str) and key:
        return names.get(key, f"key:{key}")
    return ""


def _initial_busy(records: Sequence[Record]) -> dict[str, int]:
    first = next((r for r in records if r.kind == DEMAND), None)
    if first is None:
        return {}
    return {t: int(c.get("busy", 0)) for t, c in first.data["templates"].items() if isinstance(c, dict)}


def busy_intervals(records: Sequence[Record], start: float) -> tuple[list[Interval], int]:
    """Every host's busy intervals, in start order, and how many were skipped (no template)."""
    names = _key_names(records)
    budget = _initial_busy(records)
    templates: dict[str, str] = {}
    since: dict[str, float] = {}
    seen: set[str] = set()
    closing: set[str] = set()
    out: list[Interval] = []
    skipped = 0
    for r in sorted((r for r in records if r.kind == HOST), key=lambda r: r.t):
        host, event = _host_of(r.data, names), r.data.get("event")
        if not host:
            continue
        template = r.data.get("template")
        if isinstance(template, str) and template:
            templates[host] = template
        first_seen = host not in seen
        if event in FRESH:
            seen.add(host)
        if event == CLOSING:
            closing.add(host)
        drained = event in IDLE_AFTER_WORK or (event == "closed" and host in closing)
        if event == BUSY:
            since.setdefault(host, r.t)
            continue
        if event not in ENDS:
            continue
        began = since.pop(host, None)
        known = templates.get(host, "")
        if began is None and first_seen and drained and budget.get(known, 0) > 0:
            budget[known] -= 1
            out.append(Interval(host, known, start, r.t, from_start=True))
        elif began is not None:
            if known:
                out.append(Interval(host, known, began, r.t))
            else:
                skipped += 1
    for host, began in since.items():
        if templates.get(host):
            out.append(Interval(host, templates[host], began, None))
        else:
            skipped += 1
    out.sort(key=lambda i: (i.start, i.host))
    return out, skipped


def arrivals(records: Sequence[Record]) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per template: the times of the increases of ``pending`` (one per host's worth), and the
    ``pending`` of the last demand record."""
    out: dict[str, list[float]] = {}
    last: dict[str, int] = {}
    for r in records:
        if r.kind != DEMAND:
            continue
        now: dict[str, int] = {}
        for template, counts in r.data["templates"].items():
            pending = int(counts.get("pending", 0)) if isinstance(counts, dict) else 0
            now[template] = pending
            rise = pending - last.get(template, 0)
            if rise > 0:
                out.setdefault(template, []).extend([r.t] * rise)
        last = now
    return out, last


def gangs(intervals: Iterable[Interval]) -> list[list[Interval]]:
    """The intervals grouped by job: those of one template that began and ended at the same
    millisecond (:data:`GANG_SLACK`), in start order."""
    groups: dict[tuple[str, bool, int, int | None], list[Interval]] = {}
    for i in intervals:
        ended = None if i.end is None else round(i.end / GANG_SLACK)
        groups.setdefault((i.template, i.from_start, round(i.start / GANG_SLACK), ended), []).append(i)
    return sorted(groups.values(), key=lambda g: (g[0].start, g[0].host))


def infer_jobs(records: Sequence[Record], start: float, end: float) -> Inference:
    """The jobs of ``records`` over ``[start, end]`` (the module docstring's rules)."""
    intervals, skipped = busy_intervals(records, start)
    submitted, pending_end = arrivals(records)
    done: dict[str, list[float]] = {}
    for i in intervals:
        if i.end is not None:
            done.setdefault(i.template, []).append(i.end - i.start)
    means = {t: sum(d) / len(d) for t, d in done.items() if d}
    # First in, first out: the work still pending at the end is the latest submitted; the rest
    # is matched to the busy intervals in start order.
    queues: dict[str, list[float]] = {}
    waiting: dict[str, list[float]] = {}
    for template, times in submitted.items():
        times = sorted(times)
        keep = min(len(times), pending_end.get(template, 0))
        queues[template], waiting[template] = times[: len(times) - keep], times[len(times) - keep :]
    heads = dict.fromkeys(queues, 0)
    jobs: list[Job] = []
    matched = unmatched = at_start = at_end = 0
    for gang in gangs(intervals):
        first, hosts = gang[0], len(gang)
        mean = means.get(first.template, DEFAULT_DURATION)
        duration = first.end - first.start if first.end is not None else max(end - first.start, mean)
        at_end += first.end is None
        if first.from_start:
            at_start += 1
            jobs.append(Job(start, first.template, hosts, max(0.0, duration)))
            continue
        queue, head = queues.get(first.template, []), heads.get(first.template, 0)
        taken = 0
        while taken < hosts and head + taken < len(queue) and queue[head + taken] <= first.start + MATCH_SLACK:
            taken += 1
        heads[first.template] = head + taken
        if taken:
            submit = min(queue[head], first.start)
            matched += 1
        else:
            submit = first.start
            unmatched += 1
        jobs.append(Job(submit, first.template, hosts, max(0.0, duration)))
    dropped = sum(len(queue) - heads[t] for t, queue in queues.items())
    pending = 0
    for template, times in waiting.items():
        for submit in times:
            jobs.append(Job(submit, template, 1, means.get(template, DEFAULT_DURATION)))
            pending += 1
    jobs.sort(key=lambda j: (j.submit, j.template))
    return Inference(
        tuple(jobs), tuple(intervals), matched, unmatched, at_start, at_end, pending, dropped, skipped, means
    )
