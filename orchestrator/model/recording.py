"""A flight recording (docs/recording.md): newline-delimited JSON records, read as untrusted input.

Every record is one JSON object on one line, ``{"v": 1, "t": <unix seconds>, "kind": ..., ...}``
with ``kind`` one of :data:`KINDS`. :func:`parse_line` validates one line (a
:class:`RecordingError` names the line number and what is wrong); :func:`read_records` reads a
whole recording; :func:`by_kind` and :func:`summarize` are what ``xceprov record show`` and the
replay build on. Pure: no I/O (the caller hands lines in).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from orchestrator.model.demand import DemandSnapshot, TemplateDemand

VERSION: Final = 1
DEMAND: Final = "demand"
DECISION: Final = "decision"
OP: Final = "op"
HOST: Final = "host"
CONFIG: Final = "config"
REFUSAL: Final = "refusal"
NOTICE: Final = "notice"
KINDS: Final = (DEMAND, DECISION, OP, HOST, CONFIG, REFUSAL, NOTICE)
# The members each kind must carry (beyond v, t, kind) and their JSON types.
REQUIRED: Final[Mapping[str, Mapping[str, type | tuple[type, ...]]]] = {
    DEMAND: {"term": int, "seq": int, "templates": dict},
    DECISION: {"decisions": list},
    OP: {"op": str, "provider": str, "event": str},
    HOST: {"host": str, "event": str},
    CONFIG: {"digest": str, "settings": dict},
    REFUSAL: {"scope": str, "provider": str},
    NOTICE: {"notice": dict},
}
# A demand record's counts per template, as named in the record and in TemplateDemand.
DEMAND_COUNTS: Final = (
    ("wanted", "wanted"),
    ("pending", "pending_hosts"),
    ("inFlight", "in_flight"),
    ("joined", "joined"),
    ("idle", "idle"),
    ("busy", "busy"),
)
# The longest line read (a recording is untrusted: one huge line must not exhaust memory).
MAX_LINE: Final = 1 << 20


class RecordingError(ValueError):
    """A line of a recording that is not a record (its message names the line)."""


@dataclass(frozen=True)
class Record:
    """One record: its time, kind and the rest of its members."""

    t: float
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as written (``v``, ``t``, ``kind`` first)."""
        return {"v": VERSION, "t": self.t, "kind": self.kind, **self.data}

    def encode(self) -> str:
        """One line of JSON, without the newline (compact separators)."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=False)

    def templates(self) -> set[str]:
        """The templates the record names."""
        if self.kind == DEMAND:
            return set(self.data.get("templates", {}))
        if self.kind == DECISION:
            return {str(d.get("template")) for d in self.data.get("decisions", []) if isinstance(d, dict)}
        template = self.data.get("template")
        return {template} if isinstance(template, str) and template else set()


def demand_templates(snapshot: DemandSnapshot) -> dict[str, dict[str, int]]:
    """A snapshot's templates as a demand record carries them."""
    return {
        d.template: {
            "wanted": d.wanted,
            "pending": d.pending_hosts,
            "inFlight": d.in_flight,
            "joined": d.joined,
            "idle": d.idle,
            "busy": d.busy,
        }
        for d in sorted(snapshot.templates, key=lambda d: d.template)
    }


def demand_record(snapshot: DemandSnapshot, now: float) -> Record:
    """The demand record of ``snapshot`` received at ``now``."""
    return Record(now, DEMAND, {"term": snapshot.term, "seq": snapshot.seq, "templates": demand_templates(snapshot)})


def parse_line(line: str | bytes, number: int) -> Record:
    """The record on line ``number`` (1-based); :class:`RecordingError` naming the line otherwise."""
    if len(line) > MAX_LINE:
        raise RecordingError(f"line {number}: longer than {MAX_LINE} bytes")
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordingError(f"line {number}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise RecordingError(f"line {number}: a record is a JSON object, not {type(doc).__name__}")
    version = doc.get("v")
    if version != VERSION or isinstance(version, bool):
        raise RecordingError(f"line {number}: version {version!r} is not {VERSION} (docs/recording.md)")
    t = doc.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise RecordingError(f"line {number}: t {t!r} is not a time in unix seconds")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise RecordingError(f"line {number}: kind {kind!r} is not one of {', '.join(KINDS)}")
    for name, wanted in REQUIRED[kind].items():
        value = doc.get(name)
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise RecordingError(f"line {number}: {kind} record without a valid {name!r}")
    if kind == DEMAND:
        _check_demand(doc["templates"], number)
    data = {k: v for k, v in doc.items() if k not in ("v", "t", "kind")}
    return Record(float(t), kind, data)


def _check_demand(templates: Mapping[str, Any], number: int) -> None:
    for template, counts in templates.items():
        if not isinstance(counts, dict):
            raise RecordingError(f"line {number}: demand of {template!r} is not an object")
        for name, _field in DEMAND_COUNTS:
            value = counts.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RecordingError(f"line {number}: demand of {template!r}: {name} {value!r} is not a count")


def snapshot_of(record: Record) -> DemandSnapshot:
    """The demand snapshot a demand record carries (its ``t`` as the snapshot's time), as the
    policy reads one; a missing count is 0."""
    if record.kind != DEMAND:
        raise ValueError(f"a {record.kind} record is not a demand record")
    templates = tuple(
        TemplateDemand(template, **{field: int(counts.get(name, 0)) for name, field in DEMAND_COUNTS})
        for template, counts in sorted(record.data["templates"].items())
    )
    return DemandSnapshot(int(record.data["seq"]), int(record.data["term"]), record.t, templates)


def read_records(lines: Iterable[str | bytes]) -> Iterator[Record]:
    """The records of a recording's lines (blank lines skipped); the first bad line raises."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        yield parse_line(line, number)


def by_kind(records: Iterable[Record], kind: str) -> Iterator[Record]:
    """The records of ``kind``, in the order given."""
    return (r for r in records if r.kind == kind)


@dataclass(frozen=True)
class Summary:
    """What ``xceprov record show`` prints: the period, the counts by kind, the templates."""

    first: float | None
    last: float | None
    counts: Mapping[str, int]
    templates: tuple[str, ...]

    @property
    def records(self) -> int:
        """How many records in all."""
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "first": self.first,
            "last": self.last,
            "records": self.records,
            "counts": {k: self.counts.get(k, 0) for k in KINDS},
            "templates": list(self.templates),
        }


def summarize(records: Iterable[Record]) -> Summary:
    """The summary of ``records``."""
    counts: Counter[str] = Counter()
    templates: set[str] = set()
    first: float | None = None
    last: float | None = None
    for record in records:
        counts[record.kind] += 1
        templates |= record.templates()
        first = record.t if first is None else min(first, record.t)
        last = record.t if last is None else max(last, record.t)
    return Summary(first, last, dict(counts), tuple(sorted(templates)))
