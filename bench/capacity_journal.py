"""The capacity benchmark's pure parts: the cloud's request journal grouped into create attempts,
the attempts per probe interval, one burst's row, the verdicts (``bench/bench_capacity.py``).

A **create request** is one row of the simulated cloud's request journal (``xceprov sim cloud
requests --json``): one instance asked of one offering (flavor and zone) with its outcome. A
**create attempt** on an offering is one apply's requests on it: the rows of one op on that
offering, in time order, each within ``gap`` seconds of the one before, no instance key asked
twice (a key asked again is the op applied again: a new attempt, however soon). Terraform asks
for every instance of an apply at once (up to its parallelism), so the requests of one apply are
one attempt; a loop that applies again, or another op on the same offering, is counted.

An attempt is **refused** when one of its requests was refused (``capacity`` or ``quota``): from
its last request the offering is in backoff, and the next attempt must wait at least the
shortest probe interval the configuration allows, ``(1 − jitter) · base`` (``model/backoff.py``:
the wait after failure n is drawn from ``[(1 − jitter) · c(n), c(n)]``, ``c(n) = min(max,
base · 2^(n−1))``, never shorter than that floor). "At most one create attempt per probe
interval" is then: no attempt starts less than the floor after a refused one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from orchestrator.model.instances import op_of_key
from orchestrator.model.offerings import offering_name

CREATED: Final = "created"
REFUSED: Final = frozenset({"capacity", "quota"})
# Requests of one apply further apart than this are two attempts (an apply asks at once).
ATTEMPT_GAP: Final = 1.0
TIME_RATIO_TARGET: Final = 2.0


def unix_time(value: Any) -> float:
    """A journal time: unix seconds as a number, or an RFC 3339 string."""
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Request:
    """One create request of the journal: when, on which offering, for which instance, outcome."""

    at: float
    offering: str
    key: str
    outcome: str


def requests_of(doc: Mapping[str, Any]) -> list[Request]:
    """The create requests of ``xceprov sim cloud requests --json`` (``{"requests": [{at, action,
    outcome, flavor, zone, offering, client_token, ...}, ...]}``; deletes left out), oldest first.
    A row's offering is the cloud's ``offering`` (``flavor[@zone][@subnet]``), else ``flavor[@zone]``."""
    rows = [
        Request(
            unix_time(row.get("at", row.get("time"))),
            str(row.get("offering") or offering_name(str(row["flavor"]), row.get("zone") or None, None)),
            str(row.get("client_token") or row.get("key") or ""),
            str(row["outcome"]),
        )
        for row in doc.get("requests", [])
        if row.get("action", "create") == "create"
    ]
    return sorted(rows, key=lambda r: r.at)


@dataclass
class Attempt:
    """The requests of one apply on one offering."""

    offering: str
    op: str
    start: float
    end: float
    keys: set[str] = field(default_factory=set)
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    @property
    def refused(self) -> bool:
        return any(self.outcomes.get(kind, 0) for kind in REFUSED)

    def add(self, request: Request) -> None:
        self.end = request.at
        self.keys.add(request.key)
        self.outcomes[request.outcome] = self.outcomes.get(request.outcome, 0) + 1


def attempts(requests: Sequence[Request], gap: float = ATTEMPT_GAP) -> dict[str, list[Attempt]]:
    """The create attempts per offering (the module docstring), oldest first."""
    out: dict[str, list[Attempt]] = {}
    for request in sorted(requests, key=lambda r: r.at):
        mine = out.setdefault(request.offering, [])
        op = op_of_key(request.key)
        last = mine[-1] if mine else None
        if last is None or last.op != op or request.key in last.keys or request.at - last.end > gap:
            last = Attempt(request.offering, op, request.at, request.at)
            mine.append(last)
        last.add(request)
    return out


def probe_floor(base: float, jitter: float) -> float:
    """The shortest probe interval the capacity backoff allows (the module docstring)."""
    return (1.0 - jitter) * base


def per_interval(tried: Sequence[Attempt], floor: float) -> int:
    """The most attempts of one offering within one probe interval: 1 + the attempts that started
    less than ``floor`` seconds after a refused attempt ended (0 when it was never tried)."""
    if not tried:
        return 0
    worst = 0
    for i, refused in enumerate(tried):
        if refused.refused:
            worst = max(worst, sum(1 for a in tried[i + 1 :] if a.start < refused.end + floor))
    return 1 + worst


def probe_gaps(tried: Sequence[Attempt]) -> list[float]:
    """Seconds from each refused attempt's last request to the next attempt's first."""
    return [round(b.start - a.end, 1) for a, b in itertools.pairwise(tried) if a.refused]


def offering_row(offering: str, tried: Sequence[Attempt], floor: float) -> dict[str, Any]:
    """One offering's figures over a window: attempts, requests by outcome, gaps after refusals."""
    outcomes: dict[str, int] = {}
    for attempt in tried:
        for kind, n in attempt.outcomes.items():
            outcomes[kind] = outcomes.get(kind, 0) + n
    gaps = probe_gaps(tried)
    return {
        "offering": offering,
        "attempts": len(tried),
        "refused_attempts": sum(1 for a in tried if a.refused),
        "requests": sum(outcomes.values()),
        "outcomes": dict(sorted(outcomes.items())),
        "gaps_after_refusal_s": gaps,
        "min_gap_s": min(gaps) if gaps else None,
        "per_interval": per_interval(tried, floor),
    }


def probing(requests: Sequence[Request], offerings: Sequence[str], floor: float) -> dict[str, dict[str, Any]]:
    """Per offering of ``offerings`` (in that order), its :func:`offering_row`."""
    found = attempts(requests)
    return {name: offering_row(name, found.get(name, []), floor) for name in offerings}


def audit_counts(entries: Sequence[Mapping[str, Any]], since: float, until: float) -> dict[str, int]:
    """The daemon's audit actions from ``since`` to ``until`` (unix seconds; the audit log's times
    have second precision, so the window is widened to whole seconds), counted by action."""
    first, last = math.floor(since), math.ceil(until)
    found: dict[str, int] = {}
    for entry in entries:
        if first <= unix_time(entry["time"]) <= last:
            found[str(entry["action"])] = found.get(str(entry["action"]), 0) + 1
    return dict(sorted(found.items()))


def burst_row(
    label: str, hosts: int, seconds: float, by_offering: Mapping[str, int], audit: Mapping[str, int]
) -> dict[str, Any]:
    """One burst: demand → ``hosts`` instances running in the cloud, where they went, and where
    the time went: the create ops it took (intents), how many were refused (failed applies) and
    given back (an abandoned op's keys returned: one more Terraform run each)."""
    return {
        "label": label,
        "hosts": hosts,
        "to_all_running_s": round(seconds, 2),
        "placed": dict(by_offering),
        "ops": audit.get("fact-requestIntent", 0),
        "refused_ops": audit.get("op-apply-failed", 0),
        "returned_ops": audit.get("op-returned", 0),
        "audit": dict(audit),
    }


def _ratio(top: float, bottom: float) -> float:
    return round(top / bottom, 3) if bottom > 0 else math.nan


def verdicts(results: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(line, met) for each of issue 31's capacity and quota targets that the run measured."""
    out: list[tuple[str, bool]] = []
    base, refusing = results.get("baseline"), results.get("refusing")
    if base and refusing:
        ratio = _ratio(refusing["burst"]["to_all_running_s"], base["burst"]["to_all_running_s"])
        n = refusing["burst"]["hosts"]
        out.append(
            (
                f"time to {n} instances running, half of the offerings refusing / none refusing: "
                f"{ratio:g} <= {TIME_RATIO_TARGET:g}",
                ratio <= TIME_RATIO_TARGET,
            )
        )
    if refusing and "offerings" in refusing:
        floor = refusing["probe_floor_s"]
        for name, row in refusing["offerings"].items():
            if name in refusing["refusing"] and not row["refused_attempts"]:
                out.append((f"{name}: refused in the journal: 0 refused attempts >= 1 (the fault did not bite)", False))
            if not row["refused_attempts"]:
                continue
            most = row["per_interval"]
            out.append(
                (
                    f"{name}: create attempts per probe interval ({floor:g} s): {most} <= 1 "
                    f"({row['attempts']} attempts, {row['requests']} requests, gaps after a refusal "
                    f"{row['gaps_after_refusal_s']} s)",
                    most <= 1,
                )
            )
        deleted = refusing["deleted"]
        out.append((f"instances deleted while refused: {deleted} == 0", deleted == 0))
    quota = results.get("quota")
    if quota:
        window = f"{quota['seconds']:g} s of quota refusals"
        refused = quota["outcomes"].get("quota", 0)
        out.append((f"{window}: creates refused for quota in the journal {refused} >= 1 (the fault bit)", refused >= 1))
        out.append((f"{window}: instances created {quota['created']} == 0", quota["created"] == 0))
        out.append((f"{window}: instances deleted {quota['deleted']} == 0", quota["deleted"] == 0))
        shown = (("in status --json", "status_quota_reasons"), ("at the controller", "controller_quota_reasons"))
        for where, key in shown:
            out.append((f"{window}: quota reasons {where} {quota[key]} == 1", quota[key] == 1))
    return out


def _outcomes(found: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in found.items()) or "none"


def markdown(results: Mapping[str, Any]) -> str:
    """The run's figures as the tables of docs/performance.md ("Issue 31")."""
    lines: list[str] = []
    rows = [(name, results[name]) for name in ("baseline", "refusing") if name in results]
    if rows:
        lines += [
            "| burst | to all running (best) | every round | create ops | refused | given back | placed |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, found in rows:
            b = found["burst"]
            placed = ", ".join(f"{o} {n}" for o, n in sorted(b.get("placed", {}).items()))
            rounds = ", ".join(f"{s:g}" for s in found.get("rounds_s", [b["to_all_running_s"]]))
            lines.append(
                f"| {name} {b['hosts']} | {b['to_all_running_s']:g} s | {rounds} | {b.get('ops', '')} | "
                f"{b.get('refused_ops', '')} | {b.get('returned_ops', '')} | {placed} |"
            )
    refusing = results.get("refusing") or {}
    if "offerings" in refusing:
        lines += [
            "",
            f"| offering (probe floor {refusing['probe_floor_s']:g} s) | attempts (refused) | requests | "
            "gaps after a refusal | most per probe interval |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, off in refusing["offerings"].items():
            gaps = ", ".join(f"{g:g}" for g in off["gaps_after_refusal_s"]) or "none"
            lines.append(
                f"| {name} | {off['attempts']} ({off['refused_attempts']}) | {_outcomes(off.get('outcomes', {}))} | "
                f"{gaps} | {off['per_interval']} |"
            )
    quota = results.get("quota")
    if quota:
        lines += [
            "",
            "| quota window | live | demand | attempts | requests | created | deleted "
            "| quota reasons: status, controller |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            f"| {quota['seconds']:g} s | {quota.get('live', '')} | {quota.get('hosts', '')} | "
            f"{quota.get('attempts', '')} | "
            f"{_outcomes(quota['outcomes'])} | {quota['created']} | {quota['deleted']} | "
            f"{quota['status_quota_reasons']}, {quota['controller_quota_reasons']} |",
        ]
    return "\n".join(lines)
