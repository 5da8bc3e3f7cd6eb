"""Scale-out decisions → reason codes (reconcile/reasons.py): the table of its docstring.

Each row is a decision as the policy writes it, today (``skipped: "unavailable"`` with the loop's
words, ``skipped: "failed"`` with a health block, a room limit) and with the offer policy's
evidence (``skipped`` named, ``until``, offerings), and the reasons a user reads back.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.reasons import (
    CODES,
    Reason,
    held_line,
    pass_reasons,
    primary,
    reasons_from_json,
    reasons_json,
    reasons_of,
)
from orchestrator.reconcile.scaleout import ScaleOutDecision

T = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def room(limit: str, fits: int = 0, **figures: Any) -> dict[str, Any]:
    return {"fits": fits, "limit": limit, "instances": 4, "max_instances": 4, **figures}


def held(*providers: dict[str, Any], outcome: str = "no-room") -> ScaleOutDecision:
    return ScaleOutDecision("cpu", outcome, (), {"gap": {"gap": 4}, "providers": list(providers)})


CASES: list[tuple[str, ScaleOutDecision, list[tuple[str, str, str, float | None]]]] = [
    (
        "launched",
        ScaleOutDecision(
            "cpu", "ops", (OpRequest("cpu", "sim", 4, 4),), {"providers": [{"provider": "sim", "count": 4}]}
        ),
        [("launched", "sim", "", None)],
    ),
    (
        "launched per offering",
        held(
            {
                "provider": "sim",
                "count": 4,
                "offerings": [{"offering": "c8", "count": 3}, {"offering": "c4", "count": 1}],
            },
            outcome="ops",
        ),
        [("launched", "sim", "c8", None), ("launched", "sim", "c4", None)],
    ),
    (
        "partial: the rest is below one granule",
        held(
            {"provider": "sim", "count": 4, "room": room("max_instances", fits=6), "granularity": 4}, outcome="partial"
        ),
        [("launched", "sim", "", None), ("granularity", "sim", "", None)],
    ),
    (
        "partial: the rest is over max_instances",
        held(
            {"provider": "sim", "count": 2, "room": room("max_instances", fits=2), "granularity": 1}, outcome="partial"
        ),
        [("launched", "sim", "", None), ("max-instances", "sim", "", None)],
    ),
    (
        "provider budget",
        held({"provider": "sim", "count": 0, "skipped": "provider budget", "room": room("provider budget")}),
        [("budget", "sim", "", None)],
    ),
    (
        "cluster budget",
        held({"provider": "sim", "count": 0, "skipped": "cluster budget"}),
        [("budget", "sim", "", None)],
    ),
    (
        "cooldown",
        ScaleOutDecision(
            "cpu", "cooldown", (), {"cooldown": {"last_scale_up": T - 10, "cooldown": 30, "until": T + 20}}
        ),
        [("cooldown", "", "", T + 20)],
    ),
    (
        "max_instances",
        held({"provider": "sim", "count": 0, "skipped": "max_instances", "room": room("max_instances")}),
        [("max-instances", "sim", "", None)],
    ),
    (
        "template max_instances",
        held({"provider": "sim", "count": 0, "skipped": "template max_instances"}),
        [("max-instances", "sim", "", None)],
    ),
    (
        "granularity today",
        held(
            {
                "provider": "sim",
                "count": 0,
                "skipped": "max_instances",
                "room": room("max_instances", fits=2),
                "granularity": 4,
            }
        ),
        [("granularity", "sim", "", None)],
    ),
    (
        "granularity named",
        held({"provider": "sim", "count": 0, "skipped": "granularity"}),
        [("granularity", "sim", "", None)],
    ),
    (
        "capacity block today",
        held(
            {"provider": "sim", "skipped": "failed", "block": {"class": "capacity", "until": T + 60, "text": "no room"}}
        ),
        [("backoff", "sim", "", T + 60)],
    ),
    (
        "every offering in backoff",
        held(
            {
                "provider": "sim",
                "count": 0,
                "skipped": "backoff",
                "until": T + 90,
                "offerings": [
                    {"offering": "c8@a", "skipped": "backoff", "until": T + 60},
                    {"offering": "c8@b", "skipped": "backoff", "until": T + 90},
                ],
            }
        ),
        [("backoff", "sim", "c8@a", T + 60), ("backoff", "sim", "c8@b", T + 90)],
    ),
    (
        "quota block today",
        held({"provider": "aws", "skipped": "failed", "block": {"class": "quota", "until": T + 600, "text": "limit"}}),
        [("quota", "aws", "", T + 600)],
    ),
    (
        "quota named",
        held({"provider": "aws", "count": 0, "skipped": "quota", "until": T + 600}),
        [("quota", "aws", "", T + 600)],
    ),
    (
        "no lease today",
        held({"provider": "sim", "skipped": "unavailable", "reason": "no valid lease"}),
        [("no-lease", "sim", "", None)],
    ),
    ("no lease named", held({"provider": "sim", "count": 0, "skipped": "no-lease"}), [("no-lease", "sim", "", None)]),
    (
        "breaker open",
        ScaleOutDecision(
            "cpu", "breaker-open", (), {"breaker": {"reopens_at": T + 300, "reason": "3 bootstrap failures"}}
        ),
        [("breaker-open", "", "", T + 300)],
    ),
    ("breaker probe out", ScaleOutDecision("cpu", "breaker-probe", (), {}), [("breaker-open", "", "", None)]),
    (
        "open op today",
        held({"provider": "sim", "skipped": "unavailable", "reason": f"op op-1 awaits its retry at {T + 30:.0f}"}),
        [("open-op", "sim", "", T + 30)],
    ),
    ("open op named", held({"provider": "sim", "count": 0, "skipped": "open-op"}), [("open-op", "sim", "", None)]),
    (
        "open op named with the loop's words",
        held({"provider": "sim", "skipped": "open-op", "reason": f"op op-2 awaits its retry at {T + 40:.0f}"}),
        [("open-op", "sim", "", T + 40)],
    ),
    (
        "no offering named",
        held({"provider": "sim", "count": 0, "skipped": "no-offering"}),
        [("no-offering", "sim", "", None)],
    ),
    ("no provider asked", held(), [("no-offering", "", "", None)]),
]


@pytest.mark.parametrize(("decision", "expected"), [(d, e) for _, d, e in CASES], ids=[c[0] for c in CASES])
def test_each_decision_maps_to_its_reason_codes(
    decision: ScaleOutDecision, expected: list[tuple[str, str, str, float | None]]
) -> None:
    got = reasons_of(decision)
    assert [(r.code, r.provider, r.offering, r.until) for r in got] == expected
    assert {r.code for r in got} <= set(CODES)
    assert all(r.template == "cpu" for r in got)


def test_every_code_has_a_row() -> None:
    assert {code for _, _, expected in CASES for code, *_ in expected} == set(CODES)


def test_nothing_wanted_gives_no_reason() -> None:
    assert reasons_of(ScaleOutDecision("cpu", "no-gap")) == []
    assert reasons_of(ScaleOutDecision("nope", "unknown-template")) == []


def test_the_primary_reason_is_the_first_provider_that_held_demand_back() -> None:
    decision = held(
        {"provider": "sim", "count": 2},
        {"provider": "aws", "skipped": "failed", "block": {"class": "quota", "until": T + 3720, "text": "limit"}},
        {"provider": "os", "count": 0, "skipped": "max_instances"},
        outcome="partial",
    )
    found = reasons_of(decision)
    told = primary("cpu", found)
    assert told is not None and (told.code, told.provider, told.until) == ("quota", "aws", T + 3720)
    assert told.detail == "launched 2 on sim; quota on aws until 09:02:00; max-instances on os"
    assert (
        held_line("cpu", 4, found)
        == "cpu: 4 wanted, launched 2 on sim, held: quota on aws until 09:02:00; max-instances on os"
    )
    assert primary("cpu", []) is None


def test_a_refused_round_keeps_its_launches_elsewhere_and_the_last_word_per_provider() -> None:
    first = ScaleOutDecision("cpu", "ops", (), {"providers": [{"provider": "sim", "count": 4}]})
    other = ScaleOutDecision("gpu", "ops", (), {"providers": [{"provider": "sim", "count": 1}]})
    refused = held(
        {"provider": "sim", "skipped": "failed", "block": {"class": "capacity", "until": T + 60, "text": "none"}},
        {"provider": "aws", "count": 4},
        outcome="ops",
    )
    found = pass_reasons([first, other, refused, ScaleOutDecision("gpu", "no-gap")])
    assert [(r.code, r.provider) for r in found["cpu"]] == [("backoff", "sim"), ("launched", "aws")]
    assert [(r.code, r.provider, r.count) for r in found["gpu"]] == [("launched", "sim", 1)]


def test_reasons_round_trip_through_json() -> None:
    found = {"cpu": [Reason("cpu", "quota", "aws", until=T, detail="limit"), Reason("cpu", "launched", "sim", "c8", 3)]}
    assert reasons_from_json(reasons_json(found)) == found
    assert reasons_from_json(None) == {} and reasons_from_json({"cpu": "bad"}) == {}
