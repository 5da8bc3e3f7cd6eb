"""The fidelity benchmark's pure parts (``bench/bench_fidelity.py``): the seeded workload model,
what happened read from ``xceprov cost --json``, the replay's figures read from ``xceprov replay
--json``, the comparisons and the verdicts of issue 32's fidelity check.

**The workload model** (one seed, the same for both real runs): work arrives in bursts. A burst
is 2 or 3 pieces of work (``xceprov sim submit``), each of 1–3 hosts and 60–240 s, submitted
within its first 20 s. The next burst comes when the last work of this one would end (its
submission + duration + :data:`JOIN_ALLOWANCE` for the hosts to come) plus a **quiet gap**
drawn from the middle half of ``[idle_a, idle_b]``: longer than the short ``idle_time`` (A
returns the hosts in the gap and launches new ones for the next burst) and shorter than the long
one (B keeps them idle and reuses them), so ``idle_time`` matters. Bursts start while the
period (``--minutes``) lasts; the period scales the number of bursts, not the work's sizes nor
``idle_time``. A capacity refusal window on the cheapest offering covers the second quarter of
the period (the policy falls back to the other offering), and one host gets a spot interruption
notice (:data:`NOTICE_LEAD` before its reclaim) :data:`RECLAIM_AFTER` seconds after the start
of the burst nearest 60 % of the period. The run ends :data:`TAIL` seconds after the last work
could end plus ``idle_b``: by then both settings have returned every host, so the figures do not
depend on where the period is cut (a host still live then counts up to the end, in both the
real figures and the replay's).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

JOIN_ALLOWANCE: Final = 30.0  # seconds from a submission until its hosts joined (first boot)
DURATION: Final = (60.0, 240.0)
HOSTS: Final = (1, 3)
JOBS_PER_BURST: Final = (2, 3)
SUBMIT_SPREAD: Final = 20.0
FIRST_BURST: Final = 30.0
NOTICE_LEAD: Final = 60.0
RECLAIM_AFTER: Final = 45.0
TAIL: Final = 120.0
SAME_TARGET: Final = 0.05  # replay with the same configuration: within 5 % of what happened
CHANGE_TARGET: Final = 0.10  # the change under another idle_time: within 10 % of the real change


@dataclass(frozen=True)
class Work:
    """One ``xceprov sim submit``: ``hosts`` hosts for ``duration`` s, ``at`` s after the start."""

    at: float
    hosts: int
    duration: float


@dataclass(frozen=True)
class Schedule:
    """What the bench does to both worlds, in seconds from the start of the run."""

    works: tuple[Work, ...]
    bursts: tuple[float, ...]
    refuse_from: float
    refuse_until: float
    notice_at: float
    end: float

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "works": [asdict(w) for w in self.works]}


def quiet_gap(idle_a: float, idle_b: float) -> tuple[float, float]:
    """The quiet gaps between bursts: the middle half of ``[idle_a, idle_b]``."""
    quarter = (idle_b - idle_a) / 4
    return idle_a + quarter, idle_b - quarter


def workload(minutes: float, idle_a: float, idle_b: float, seed: int = 32) -> Schedule:
    """The seeded schedule of the module docstring over a period of ``minutes``."""
    if not 0 < idle_a < idle_b:
        raise ValueError(f"idle times: need 0 < A < B, got A {idle_a:g} s, B {idle_b:g} s")
    rng = random.Random(seed)
    period = minutes * 60.0
    low, high = quiet_gap(idle_a, idle_b)
    works: list[Work] = []
    bursts: list[float] = []
    t = FIRST_BURST
    while t < period or not bursts:
        bursts.append(t)
        busy_end = t
        for _ in range(rng.randint(*JOBS_PER_BURST)):
            work = Work(
                round(t + rng.uniform(0, SUBMIT_SPREAD), 1),
                rng.randint(*HOSTS),
                round(rng.uniform(*DURATION)),
            )
            works.append(work)
            busy_end = max(busy_end, work.at + work.duration + JOIN_ALLOWANCE)
        t = busy_end + rng.uniform(low, high)
    last_end = max(w.at + w.duration + JOIN_ALLOWANCE for w in works)
    middle = min(bursts, key=lambda b: abs(b - 0.6 * period))
    return Schedule(
        works=tuple(sorted(works, key=lambda w: w.at)),
        bursts=tuple(round(b, 1) for b in bursts),
        refuse_from=round(0.25 * period, 1),
        refuse_until=round(0.5 * period, 1),
        notice_at=round(middle + RECLAIM_AFTER, 1),
        end=round(last_end + idle_b + TAIL, 1),
    )


# -- what happened, and what the replay says ------------------------------------------------------


def real_figures(cost_doc: Mapping[str, Any]) -> dict[str, float]:
    """Money and host-hours of ``xceprov cost --json`` over the period (each instance's life
    clipped to it): ``total``, and the instances' running and stopped seconds / 3600."""
    items = list(cost_doc.get("instances", []))
    seconds = sum(float(i.get("running_seconds", 0)) + float(i.get("stopped_seconds", 0)) for i in items)
    return {
        "cost": round(float(cost_doc.get("total", 0.0)), 6),
        "host_hours": round(seconds / 3600, 6),
        "instances": len(items),
    }


def clipped_figures(cost_doc: Mapping[str, Any], since: float, until: float) -> dict[str, float]:
    """:func:`real_figures` over ``[since, until]`` only, from a ``xceprov cost --json`` of a
    period that holds it: each instance's running time (its ``start`` to its ``end``, or to the
    document's ``until`` while it lives) clipped to the window, its cost in proportion (one price
    per instance: no stopped time in these runs)."""
    doc_since, doc_until = float(cost_doc.get("since", since)), float(cost_doc.get("until", until))
    seconds = cost = 0.0
    instances = 0
    for item in cost_doc.get("instances", []):
        start = max(float(item["start"]), doc_since)
        end = min(float(item["end"]) if item.get("end") is not None else doc_until, doc_until)
        lived = max(0.0, end - start)
        inside = max(0.0, min(end, until) - max(start, since))
        if inside <= 0:
            continue
        instances += 1
        seconds += inside
        cost += float(item.get("cost", 0.0)) * inside / lived if lived > 0 else 0.0
    return {"cost": round(cost, 6), "host_hours": round(seconds / 3600, 6), "instances": instances}


def bill_figures(bill_doc: Mapping[str, Any]) -> dict[str, float]:
    """The simulated cloud's own bill (``xceprov sim cloud bill --json``) over the period: its
    total (at the catalogue's prices) and the instance-hours it billed."""
    total = bill_doc.get("total", 0.0)
    if isinstance(total, Mapping):  # {cost, instances, running_seconds, ...}
        return {
            "cost": round(float(total.get("cost", 0.0)), 6),
            "host_hours": round(float(total.get("running_seconds", 0.0)) / 3600, 6),
        }
    seconds = sum(float(r.get("running_seconds", 0)) for r in _rows(bill_doc))
    return {"cost": round(float(total), 6), "host_hours": round(seconds / 3600, 6)}


def _rows(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for key in ("instances", "items", "lines", "rows"):
        if isinstance(doc.get(key), list):
            return list(doc[key])
    return []


def _runs(doc: Any) -> Iterator[Mapping[str, Any]]:
    """Every object of ``doc`` (any depth) that looks like a run's figures."""
    if isinstance(doc, Mapping):
        if "host_hours" in doc and "cost" in doc:
            yield doc
        for value in doc.values():
            yield from _runs(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _runs(value)


def replay_runs(doc: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The ``recorded`` and ``replayed`` figures of ``xceprov replay --json`` (``RunFigures.
    to_json``: found by their ``label``, or by their key when they carry none)."""
    found: dict[str, dict[str, float]] = {}
    for key in ("recorded", "replayed"):
        if isinstance(doc.get(key), Mapping) and "host_hours" in doc[key]:
            found[key] = _figures(doc[key])
    for run in _runs(doc):
        label = str(run.get("label", ""))
        if label in ("recorded", "replayed") and label not in found:
            found[label] = _figures(run)
    return found


def _figures(run: Mapping[str, Any]) -> dict[str, float]:
    keep = ("cost", "host_hours", "pending_host_minutes", "launches", "returns", "lost", "start", "end")
    return {k: float(run[k]) for k in keep if k in run and run[k] is not None}


# -- the comparisons ------------------------------------------------------------------------------


def rel(value: float, reference: float) -> float:
    """|value − reference| / |reference| (NaN when the reference is 0)."""
    return abs(value - reference) / abs(reference) if reference else math.nan


def compare(
    real_a: Mapping[str, float],
    real_b: Mapping[str, float],
    same: Mapping[str, float],
    other: Mapping[str, float],
    recorded: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The fidelity figures: replay A→A against real A; the predicted change against the real
    change (real B − real A). The predicted change is the one ``xceprov replay`` prints: replay
    A→B − recorded (what the recording shows happened under A, known, not predicted); without
    ``recorded``, replay A→B − replay A→A. Beside it, the **model change** (replay A→B − replay
    A→A: one model under both settings), which carries any bias the A→A check shows twice."""
    out: dict[str, Any] = {}
    for what in ("host_hours", "cost"):
        real_change = real_b[what] - real_a[what]
        base = recorded[what] if recorded and what in recorded else same[what]
        predicted = other[what] - base
        model = other[what] - same[what]
        out[what] = {
            "real_a": real_a[what],
            "real_b": real_b[what],
            "recorded": base,
            "replay_a_a": same[what],
            "replay_a_b": other[what],
            "same_error": round(rel(same[what], real_a[what]), 4),
            "real_change": round(real_change, 6),
            "predicted_change": round(predicted, 6),
            "change_error": round(rel(predicted, real_change), 4),
            "same_direction": predicted * real_change > 0,
            "model_change": round(model, 6),
            "model_change_error": round(rel(model, real_change), 4),
        }
    return out


def verdicts(found: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(line, met) per check: same configuration within 5 %; the change's direction, and its
    size within 10 %, for host-hours and cost."""
    out: list[tuple[str, bool]] = []
    for what, name in (("host_hours", "host-hours"), ("cost", "cost")):
        row = found[what]
        err = row["same_error"]
        out.append(
            (
                f"{name}, replay A->A {row['replay_a_a']:.4f} vs real A {row['real_a']:.4f}: "
                f"{100 * err:.1f} % <= {100 * SAME_TARGET:g} %",
                err <= SAME_TARGET,
            )
        )
        out.append(
            (
                f"{name}, direction of the change under idle_time B: predicted (replay A->B - recorded A) "
                f"{row['predicted_change']:+.4f}, "
                f"real {row['real_change']:+.4f}",
                bool(row["same_direction"]),
            )
        )
        err = row["change_error"]
        out.append(
            (
                f"{name}, size of the change: predicted {row['predicted_change']:+.4f} vs real "
                f"{row['real_change']:+.4f}: {100 * err:.1f} % <= {100 * CHANGE_TARGET:g} %",
                err <= CHANGE_TARGET,
            )
        )
    return out


def table(found: Mapping[str, Any]) -> str:
    """The figures as the table of docs/performance.md ("Issue 32: replay fidelity")."""
    lines = [
        "| figure | real A | real B | real B − A | recorded A | replay A→A (err) | replay A→B "
        "| predicted B − A (err) | model B − A (err) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for what, name in (("host_hours", "host-hours"), ("cost", "cost")):
        r = found[what]
        lines.append(
            f"| {name} | {r['real_a']:.4f} | {r['real_b']:.4f} | {r['real_change']:+.4f} | {r['recorded']:.4f} | "
            f"{r['replay_a_a']:.4f} ({_pct(r['same_error'])}) | {r['replay_a_b']:.4f} | "
            f"{r['predicted_change']:+.4f} ({_pct(r['change_error'])}) | "
            f"{r['model_change']:+.4f} ({_pct(r['model_change_error'])}) |"
        )
    return "\n".join(lines)


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f} %"


def counts(values: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
    """How many of ``values`` have each value of ``key``."""
    out: dict[str, int] = {}
    for v in values:
        out[str(v.get(key))] = out.get(str(v.get(key)), 0) + 1
    return dict(sorted(out.items()))
