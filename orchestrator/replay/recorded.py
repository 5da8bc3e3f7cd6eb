"""A replay's model world drawn from a flight recording (docs/replay.md, "From a recording").

:func:`model_of_recording` turns the records of a recording (docs/recording.md; read and
validated by :mod:`orchestrator.model.recording`) into a :class:`~orchestrator.replay.model.WorldModel`:

* the period: the first record's time to the last's;
* the jobs: inferred from the demand snapshots and the host events (:mod:`.recorded_jobs`);
* the latencies: per create op its intent to its first ``created`` (launch), per host its
  ``expected`` to its ``joined`` (join);
* the refusal windows: each ``refusal`` record's ``first`` to ``last`` (the cloud refused at
  least then), merged where they overlap for one (scope, provider, placement);
* the losses: each ``lost`` fact of an op (``host`` record, event ``lost`` without a controller
  ``state``), with the lead of a spot interruption notice of the same instance when one was seen.

:func:`figures_of_recording` (:mod:`.recorded_figures`) says what the recording shows happened,
priced by the candidate configuration.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from orchestrator.model.instances import op_of_key
from orchestrator.model.recording import HOST, NOTICE, OP, REFUSAL, Record, RecordingError
from orchestrator.replay.model import QUOTA, Latencies, Loss, RefusalWindow, WorldModel
from orchestrator.replay.recorded_figures import figures_of_recording
from orchestrator.replay.recorded_jobs import infer_jobs

__all__ = ["figures_of_recording", "join_latencies", "launch_latencies", "losses", "model_of_recording", "refusals"]

# The reason of a loss whose fact says none.
UNKNOWN_REASON: Final = "lost"


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    return value if isinstance(value, str) else ""


def _number(data: Mapping[str, Any], name: str, default: float) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def _is_fact(record: Record) -> bool:
    """A host record of an op's fact (the controller's host events carry its ``state``)."""
    return record.kind == HOST and "state" not in record.data


def launch_latencies(records: Iterable[Record]) -> tuple[float, ...]:
    """Per create op: seconds from its latest intent before its first ``created`` to that ``created``."""
    intents: dict[str, list[float]] = {}
    created: dict[str, float] = {}
    for r in records:
        if r.kind != OP:
            continue
        op, event = _text(r.data, "op"), r.data.get("event")
        if event == "intent":
            intents.setdefault(op, []).append(r.t)
        elif event == "created":
            created[op] = min(created.get(op, r.t), r.t)
    out = []
    for op, made in sorted(created.items(), key=lambda item: item[1]):
        before = [t for t in intents.get(op, ()) if t <= made]
        if before:
            out.append(made - max(before))
    return tuple(out)


def join_latencies(records: Iterable[Record]) -> tuple[float, ...]:
    """Per host: seconds from its ``expected`` fact to the controller's first ``joined`` after it
    (hosts named by name, else by instance key; a later ``joined``, a rejoin, is no sample)."""
    expected: dict[str, int] = {}  # host name or key → its entry
    began: list[float | None] = []  # per entry: when expected; None once joined
    out: list[float] = []
    for r in sorted((r for r in records if r.kind == HOST), key=lambda r: r.t):
        event = r.data.get("event")
        names = [n for n in (_text(r.data, "host"), "key:" + _text(r.data, "key")) if n not in ("", "key:")]
        if event == "expected" and _is_fact(r) and not any(n in expected for n in names):
            for name in names:
                expected[name] = len(began)
            began.append(r.t)
        elif event == "joined":
            entry = next((expected[n] for n in names if n in expected), None)
            when = began[entry] if entry is not None else None
            if entry is not None and when is not None and r.t >= when:
                out.append(r.t - when)
                began[entry] = None
    return tuple(out)


def refusals(records: Iterable[Record]) -> tuple[RefusalWindow, ...]:
    """The refusal windows (``first`` to ``max(last, first)``), overlapping ones merged per
    (scope, provider, placement); quota windows name no placement."""
    by_key: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in records:
        if r.kind != REFUSAL:
            continue
        scope = _text(r.data, "scope")
        placement = "" if scope == QUOTA else _text(r.data, "placement")
        first = _number(r.data, "first", r.t)
        last = max(_number(r.data, "last", first), first)
        by_key.setdefault((scope, _text(r.data, "provider"), placement), []).append((first, last))
    out: list[RefusalWindow] = []
    for (scope, provider, placement), spans in sorted(by_key.items()):
        spans.sort()
        start, end = spans[0]
        for first, last in spans[1:]:
            if first <= end:
                end = max(end, last)
                continue
            out.append(RefusalWindow(scope, provider, placement, start, end))
            start, end = first, last
        out.append(RefusalWindow(scope, provider, placement, start, end))
    return tuple(sorted(out, key=lambda w: (w.start, w.scope, w.provider, w.placement)))


def _reason(text: str) -> str:
    """A ``lost`` fact's reason: its detail is JSON ``{"reason": ...}`` (the host-loss path's)."""
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return UNKNOWN_REASON
        found = doc.get("reason") if isinstance(doc, dict) else None
        return found if isinstance(found, str) and found else UNKNOWN_REASON
    return text or UNKNOWN_REASON


def _templates_by_key(records: Iterable[Record]) -> tuple[dict[str, str], dict[str, str]]:
    """(instance key → template, op id → template) from every record naming them."""
    keys: dict[str, str] = {}
    ops: dict[str, str] = {}
    for r in records:
        template = _text(r.data, "template")
        if not template:
            continue
        if r.kind == OP and _text(r.data, "op"):
            ops.setdefault(_text(r.data, "op"), template)
        if _text(r.data, "key"):
            keys.setdefault(_text(r.data, "key"), template)
    return keys, ops


def _notice_leads(records: Iterable[Record]) -> dict[str, float]:
    """Instance id, key and host name → seconds the cloud's notice came before the reclaim."""
    out: dict[str, float] = {}
    for r in records:
        if r.kind != NOTICE:
            continue
        row = r.data["notice"]
        lead = _number(row, "reclaim_at", 0.0) - _number(row, "noticed_at", 0.0)
        if lead <= 0:
            continue
        for name in ("instance_id", "instance_key", "host_name"):
            if _text(row, name):
                out.setdefault(f"{name}:{_text(row, name)}", lead)
    return out


def losses(records: Sequence[Record]) -> tuple[Loss, ...]:
    """Each instance's ``lost`` fact (once per key) as a loss of its template on its provider."""
    keys, ops = _templates_by_key(records)
    leads = _notice_leads(records)
    seen: set[str] = set()
    out: list[Loss] = []
    for r in sorted(records, key=lambda r: r.t):
        if not (_is_fact(r) and r.data.get("event") == "lost"):
            continue
        key = _text(r.data, "key")
        if key and key in seen:
            continue
        seen.add(key)
        template = _text(r.data, "template") or keys.get(key, "") or ops.get(op_of_key(key) if key else "", "")
        instance, host = _text(r.data, "instance"), _text(r.data, "host")
        names = [f"instance_id:{instance}", f"instance_key:{key}", f"host_name:{host}"]
        notice = next((leads[n] for n in names if n in leads), 0.0)
        out.append(Loss(r.t, _text(r.data, "provider"), template, _reason(_text(r.data, "reason")), notice))
    return tuple(out)


def model_of_recording(records: Sequence[Record]) -> WorldModel:
    """The model world of a recording (the module docstring); a recording without records is a
    :class:`RecordingError`."""
    if not records:
        raise RecordingError("the recording holds no records")
    records = sorted(records, key=lambda r: r.t)  # stable: records of one time keep their order
    start, end = records[0].t, records[-1].t
    inferred = infer_jobs(records, start, end)
    return WorldModel(
        start=start,
        end=end,
        jobs=inferred.jobs,
        latencies=Latencies(launch_latencies(records), join_latencies(records)),
        refusals=refusals(records),
        losses=losses(records),
        source="recording",
    )
