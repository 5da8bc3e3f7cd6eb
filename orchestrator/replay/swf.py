"""A replay's model world drawn from a workload trace in the Standard Workload Format (SWF).

The Parallel Workloads Archive's format (version 2.2): one job per line, 18 whitespace-separated
numeric fields (:data:`FIELDS`; ``-1`` = unknown), header comments on lines that begin with
``;`` (``; UnixStartTime: <unix seconds>`` says when submit time 0 was). :func:`read_swf` reads a
trace as untrusted input: a line longer than :data:`MAX_LINE` characters, more than
:data:`MAX_JOBS` job lines, a job line without 18 fields or with a field that is not a finite
number, or a required field out of range is an :class:`SwfError` naming the line and the field.
A job that ran for no time (run time ≤ 0, unknown included) or on no processors (allocated and
requested ≤ 0) is skipped and counted: the archive's logs hold cancelled jobs so.

:func:`model_of_swf` turns a trace into the jobs of a :class:`~orchestrator.replay.model.WorldModel`
by the mapping :class:`SwfMapping` documents (docs/replay.md, "From a workload trace (SWF)"). A
trace says nothing of the cloud: no refusals, no losses, the latencies given or the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from orchestrator.model.config import Config
from orchestrator.replay.model import Job, Latencies, WorldModel

# The 18 fields of a job line, in order (the archive's names).
FIELDS: Final = (
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average cpu time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job number",
    "think time",
)
# Untrusted input: the longest line read and the most job lines (the archive's largest logs hold
# a few million jobs; a replay of more than this is not what the tool is for).
MAX_LINE: Final = 4096
MAX_JOBS: Final = 1_000_000
MAX_HEADERS: Final = 1000
# The time of submit 0 when the trace has no ``UnixStartTime`` (2024-01-01T00:00:00Z).
EPOCH: Final = 1_704_067_200.0
UNIX_START: Final = "UnixStartTime"


class SwfError(ValueError):
    """A trace (or its mapping) that cannot be read; the message names the line and the field."""


@dataclass(frozen=True)
class SwfJob:
    """The fields of one job line a replay reads (seconds; processors; -1 unknown)."""

    number: int
    submit: float
    run: float
    allocated: int
    requested: int
    queue: int = -1
    partition: int = -1

    @property
    def processors(self) -> int:
        """Processors allocated, else requested."""
        return self.allocated if self.allocated > 0 else self.requested


@dataclass(frozen=True)
class SwfTrace:
    """A trace read: its jobs in submit order, its header comments, the jobs skipped."""

    name: str
    jobs: tuple[SwfJob, ...]
    header: Mapping[str, str] = field(default_factory=dict)
    skipped: int = 0

    @property
    def unix_start(self) -> float | None:
        """The header's ``UnixStartTime`` (None when absent)."""
        text = self.header.get(UNIX_START)
        return float(text) if text is not None else None


def _number(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SwfError(f"{where} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise SwfError(f"{where} {text!r} is not a finite number")
    return value


def _header(line: str, number: int, name: str, header: dict[str, str]) -> None:
    body = line.lstrip(";").strip()
    key, colon, value = body.partition(":")
    if not colon or not key.strip() or " " in key.strip():
        return  # a free comment
    key, value = key.strip(), value.strip()
    if key == UNIX_START:
        start = _number(value, f"{name}: line {number}: {UNIX_START}")
        if start < 0:
            raise SwfError(f"{name}: line {number}: {UNIX_START} {value!r} is not a time in unix seconds")
    if len(header) < MAX_HEADERS:
        header.setdefault(key, value)


def _job(line: str, number: int, name: str) -> SwfJob | None:
    parts = line.split()
    if len(parts) != len(FIELDS):
        raise SwfError(f"{name}: line {number}: {len(parts)} fields; an SWF job line has {len(FIELDS)}")
    values = [_number(text, f"{name}: line {number}: field {i + 1} ({FIELDS[i]})") for i, text in enumerate(parts)]
    for index in (0, 4, 7, 14, 15):
        if values[index] != int(values[index]):
            where = f"{name}: line {number}: field {index + 1} ({FIELDS[index]})"
            raise SwfError(f"{where} {parts[index]!r} is not an integer")
    if values[1] < 0:
        raise SwfError(f"{name}: line {number}: field 2 (submit time) {parts[1]!r} is not a time (seconds ≥ 0)")
    job = SwfJob(int(values[0]), values[1], values[3], int(values[4]), int(values[7]), int(values[14]), int(values[15]))
    return job if job.run > 0 and job.processors > 0 else None


def read_swf(lines: Iterable[str], name: str) -> SwfTrace:
    """The trace of ``lines`` (``name`` says which file in an error); blank lines are skipped."""
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    skipped = read = 0
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_LINE:
            raise SwfError(f"{name}: line {number}: longer than {MAX_LINE} characters")
        text = line.strip()
        if not text:
            continue
        if text.startswith(";"):
            _header(text, number, name, header)
            continue
        read += 1
        if read > MAX_JOBS:
            raise SwfError(f"{name}: line {number}: more than {MAX_JOBS} jobs")
        job = _job(text, number, name)
        if job is None:
            skipped += 1
        else:
            jobs.append(job)
    jobs.sort(key=lambda j: (j.submit, j.number))
    return SwfTrace(name, tuple(jobs), header, skipped)


@dataclass(frozen=True)
class SwfMapping:
    """How a trace's jobs become a replay's jobs (docs/replay.md, "From a workload trace (SWF)").

    A job's template: ``template`` when set (every job); else the template its ``partitions``
    entry names (by the job's partition number), else its ``queues`` entry (by queue number);
    else the first template of the configuration whose hosts can hold it. Its hosts: its
    processors (allocated, else requested) over the template's slots per host
    (``xce.slots``), rounded up. A job that needs more hosts than its template can ever have
    (the sum over its providers of the template's and the provider's ``max_instances``) is
    dropped (:func:`map_swf` counts it). Times: submit 0 is ``epoch`` when set, else the
    trace's ``UnixStartTime``, else :data:`EPOCH`.
    """

    template: str | None = None
    queues: Mapping[int, str] = field(default_factory=dict)
    partitions: Mapping[int, str] = field(default_factory=dict)
    epoch: float | None = None


@dataclass(frozen=True)
class Mapped:
    """A trace's jobs as a replay's, the jobs dropped (too big for their template), the epoch."""

    jobs: tuple[Job, ...]
    dropped: int
    epoch: float


def max_hosts(config: Config, template: str) -> int:
    """The most hosts ``template`` can have at once: per provider the lower of the template's and
    the provider's ``max_instances``, summed."""
    out = 0
    for provider, side in config.templates[template].providers.items():
        limit = config.providers[provider].max_instances if provider in config.providers else 0
        out += min(limit, side.max_instances) if side.max_instances is not None else limit
    return out


def _hosts(config: Config, template: str, processors: int) -> int:
    return math.ceil(processors / config.templates[template].xce.slots)


def _check(config: Config, mapping: SwfMapping) -> None:
    named = [("template", mapping.template)] if mapping.template is not None else []
    named += [(f"queue {q}", t) for q, t in mapping.queues.items()]
    named += [(f"partition {p}", t) for p, t in mapping.partitions.items()]
    for what, template in named:
        if template not in config.templates:
            raise SwfError(f"SWF mapping: {what}: {template!r} is not a template of the configuration")


def _template(config: Config, mapping: SwfMapping, job: SwfJob, room: Mapping[str, int]) -> str | None:
    chosen = mapping.template or mapping.partitions.get(job.partition) or mapping.queues.get(job.queue)
    if chosen is not None:
        return chosen if _hosts(config, chosen, job.processors) <= room[chosen] else None
    return next((t for t in config.templates if _hosts(config, t, job.processors) <= room[t]), None)


def map_swf(trace: SwfTrace, config: Config, mapping: SwfMapping | None = None) -> Mapped:
    """The jobs of ``trace`` on the templates of ``config`` (:class:`SwfMapping`'s rules)."""
    mapping = mapping or SwfMapping()
    _check(config, mapping)
    epoch = mapping.epoch if mapping.epoch is not None else trace.unix_start
    epoch = EPOCH if epoch is None else epoch
    room = {t: max_hosts(config, t) for t in config.templates}
    jobs: list[Job] = []
    dropped = 0
    for job in trace.jobs:
        template = _template(config, mapping, job, room)
        if template is None:
            dropped += 1
            continue
        jobs.append(Job(epoch + job.submit, template, _hosts(config, template, job.processors), job.run))
    return Mapped(tuple(jobs), dropped, epoch)


# How long a trace's model runs past its last job's end: the same for every candidate (so their
# periods compare), long enough for idle hosts to be returned (docs/replay.md).
SETTLE: Final = 3600.0


def model_of_swf(
    trace: SwfTrace, config: Config, mapping: SwfMapping | None = None, latencies: Latencies | None = None
) -> WorldModel:
    """The model world of a trace: its jobs by ``mapping``, from the first submit to an hour
    after the last job's end (submit + run time: :data:`SETTLE`, so that the hosts of the last
    work are returned within the period under any usual ``idle_time``); no refusals or losses;
    ``latencies`` or the defaults."""
    mapped = map_swf(trace, config, mapping)
    if not mapped.jobs:
        raise SwfError(f"{trace.name}: no job of the trace fits a template of the configuration")
    start = min(j.submit for j in mapped.jobs)
    end = max(j.submit + j.duration for j in mapped.jobs) + SETTLE
    return WorldModel(start, end, mapped.jobs, latencies or Latencies(), source=f"swf:{trace.name}")
