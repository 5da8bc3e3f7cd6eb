"""What a flight recording shows happened, as run figures (docs/replay.md, "From a recording").

The instances: each one an op's ``created`` record made (instance key, provider, template, op),
live until its ``returned`` or ``lost`` fact (or the recording's end); an instance the recording
names (a host event with its key) but did not see made was made before it began, and counts
from its start. Each is priced by the CANDIDATE configuration, as the replay's instances are
(docs/replay.md): ``budget.unit_cost`` of its template on its provider, on the offering its op's
intent placed it on (``placements``, in key order; the template's default offering when the
intent names none), per second (``model/costs.py``). A warm-pool instance is priced running
(the recording does not say it was stopped).

Pending host-minutes are the integral of the demand records' ``pending`` summed over templates
(each record standing until the next, the last until the end). Launches count instances made,
returns and losses their ``returned`` and ``lost`` facts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from orchestrator.model.config import Config
from orchestrator.model.costs import Stretch, item_of
from orchestrator.model.instances import op_of_key
from orchestrator.model.offerings import Placement, offering_at
from orchestrator.model.recording import DEMAND, HOST, OP, Record, RecordingError
from orchestrator.reconcile.budget import unit_cost
from orchestrator.replay.figures import RunFigures, Sample

RETURNED: Final = "returned"
LOST: Final = "lost"
# The figures ``by_template`` holds per template (the run's totals, per template).
BY_TEMPLATE: Final = ("cost", "host_hours", "pending_host_minutes", "launches", "returns", "lost")


@dataclass(frozen=True)
class Life:
    """One instance as the recording shows it: made at ``start``, gone at ``end`` (None: live at
    the end) by ``gone`` (``returned``, ``lost``, "")."""

    key: str
    op: str
    provider: str
    template: str
    offering: str
    instance: str
    start: float
    end: float | None
    gone: str = ""
    made: bool = True  # made within the recording (a launch); False: live when it began


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    return value if isinstance(value, str) else ""


def _placements(data: Mapping[str, Any]) -> list[Placement]:
    """An intent record's ``placements`` (``[[offering, count], ...]``); malformed ones are none."""
    out: list[Placement] = []
    raw = data.get("placements")
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int):
            out.append(Placement(item[0], item[1]))
    return out


def _index(key: str) -> int:
    tail = key.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def lives(records: Sequence[Record], start: float) -> list[Life]:
    """Every instance of the recording, in the order it was made (those made before it first)."""
    intents: dict[str, tuple[str, list[Placement]]] = {}
    made: dict[str, Life] = {}
    gone: dict[str, tuple[float, str]] = {}
    named: dict[str, tuple[str, str, str]] = {}  # key → (provider, template, instance) from host records
    for r in sorted(records, key=lambda r: r.t):
        key, event = _text(r.data, "key"), r.data.get("event")
        if r.kind == OP and event == "intent":
            intents.setdefault(_text(r.data, "op"), (_text(r.data, "template"), _placements(r.data)))
        elif r.kind == OP and event == "created" and key and key not in made:
            op = _text(r.data, "op") or op_of_key(key)
            template, placed = intents.get(op, ("", []))
            made[key] = Life(
                key,
                op,
                _text(r.data, "provider"),
                _text(r.data, "template") or template,
                offering_at(placed, _index(key), ""),
                _text(r.data, "instance"),
                r.t,
                None,
            )
        elif r.kind == HOST and key:
            if "state" not in r.data and event in (RETURNED, LOST):
                gone.setdefault(key, (r.t, str(event)))
            if _text(r.data, "provider") and _text(r.data, "template"):
                named.setdefault(key, (_text(r.data, "provider"), _text(r.data, "template"), _text(r.data, "instance")))
    before = [
        Life(key, op_of_key(key), provider, template, "", instance, start, None, made=False)
        for key, (provider, template, instance) in sorted(named.items())
        if key not in made and op_of_key(key) not in intents
    ]
    out = []
    for life in before + sorted(made.values(), key=lambda lf: (lf.start, lf.key)):
        end, why = gone.get(life.key, (None, ""))
        if end is not None and end < life.start:
            end = life.start
        out.append(replace(life, end=end, gone=why))
    return out


def _price(config: Config, life: Life) -> float:
    return unit_cost(config, life.provider, life.template, offering=life.offering)


def _pending_steps(records: Iterable[Record]) -> list[tuple[float, dict[str, int], int]]:
    """(t, pending per template, pending + busy in all) of each demand record, in time order."""
    out = []
    for r in sorted((r for r in records if r.kind == DEMAND), key=lambda r: r.t):
        counts = {t: c for t, c in r.data["templates"].items() if isinstance(c, dict)}
        pending = {t: int(c.get("pending", 0)) for t, c in counts.items()}
        out.append((r.t, pending, sum(int(c.get("pending", 0)) + int(c.get("busy", 0)) for c in counts.values())))
    return out


def _pending_minutes(steps: Sequence[tuple[float, dict[str, int], int]], end: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for index, (t, pending, _demand) in enumerate(steps):
        until = steps[index + 1][0] if index + 1 < len(steps) else end
        for template, hosts in pending.items():
            out[template] = out.get(template, 0.0) + hosts * max(0.0, until - t) / 60.0
    return out


def _samples(
    steps: Sequence[tuple[float, dict[str, int], int]],
    priced: Sequence[tuple[Life, float]],
    start: float,
    end: float,
    every: float,
) -> list[Sample]:
    """The world every ``every`` seconds from ``start`` (and at ``end``): a sweep over the
    instances' starts and ends (supply, spend rate) and the demand records."""
    changes: list[tuple[float, int, float]] = []
    for life, price in priced:
        changes.append((life.start, 1, price))
        if life.end is not None:
            changes.append((life.end, -1, -price))
    changes.sort(key=lambda c: c[0])
    times = [start + k * every for k in range(int((end - start) // every) + 1)] if every > 0 else [start]
    if times[-1] < end:
        times.append(end)
    step_times = [s[0] for s in steps]
    out: list[Sample] = []
    supply, rate, spend, at, index = 0, 0.0, 0.0, start, 0
    for t in times:
        while index < len(changes) and changes[index][0] <= t:
            when, count, price = changes[index]
            spend += rate * (max(when, start) - at) / 3600.0
            at = max(when, start)
            supply, rate = supply + count, rate + price
            index += 1
        spend += rate * (t - at) / 3600.0
        at = t
        found = bisect.bisect_right(step_times, t) - 1
        demand = steps[found][2] if found >= 0 else 0
        out.append(Sample(t, demand, supply, spend))
    return out


def figures_of_recording(records: Sequence[Record], config: Config, samples_every: float = 60.0) -> RunFigures:
    """What the recording shows happened over its period (the module docstring), label ``recorded``."""
    if not records:
        raise RecordingError("the recording holds no records")
    start = min(r.t for r in records)
    end = max(r.t for r in records)
    priced = [(life, _price(config, life)) for life in lives(records, start)]
    by_template: dict[str, dict[str, float]] = {}

    def add(template: str, name: str, value: float) -> None:
        row = by_template.setdefault(template, dict.fromkeys(BY_TEMPLATE, 0.0))
        row[name] += value

    cost = host_hours = 0.0
    for life, price in priced:
        identity = {
            "key": life.key,
            "op_id": life.op,
            "provider": life.provider,
            "template": life.template,
            "offering": life.offering,
            "groups": (),
            "instance_id": life.instance,
        }
        stretch = Stretch(life.start, end if life.end is None else life.end, price)
        item = item_of(identity, [stretch], start, end, life.end)
        cost += item.cost
        host_hours += item.running_seconds / 3600.0
        add(life.template, "cost", item.cost)
        add(life.template, "host_hours", item.running_seconds / 3600.0)
        if life.made:
            add(life.template, "launches", 1)
        if life.gone == RETURNED:
            add(life.template, "returns", 1)
        elif life.gone == LOST:
            add(life.template, "lost", 1)
    steps = _pending_steps(records)
    pending = _pending_minutes(steps, end)
    for template, minutes in pending.items():
        add(template, "pending_host_minutes", minutes)
    return RunFigures(
        label="recorded",
        start=start,
        end=end,
        cost=cost,
        host_hours=host_hours,
        pending_host_minutes=sum(pending.values()),
        launches=int(sum(row["launches"] for row in by_template.values())),
        returns=int(sum(row["returns"] for row in by_template.values())),
        lost=int(sum(row["lost"] for row in by_template.values())),
        by_template=by_template,
        samples=_samples(steps, priced, start, end, samples_every),
    )
