"""Durations and plain values: what a configuration value may be, and the one line when it is not."""

from __future__ import annotations

import datetime
import math

import pytest

from orchestrator.model.durations import MAX_DURATION, parse_duration
from orchestrator.model.values import MAX_INTEGER, OversizedNumber, shown, value_problems


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (1.5, 1.5),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("3650d", MAX_DURATION),
    ],
)
def test_a_duration_is_seconds(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (math.nan, "not a number"),
        (math.inf, "longer than the longest accepted, 3650d"),
        (-math.inf, "negative"),
        (10**400, "longer than the longest accepted"),  # float(10**400) would be an OverflowError
        (MAX_DURATION + 1, "longer than the longest accepted"),
        ("3651d", "longer than the longest accepted"),
        ("9" * 400 + "d", "longer than the longest accepted"),
        (-1, "negative"),
        (True, "a boolean"),
        (datetime.date(2024, 1, 1), "a YAML date (2024-01-01)"),
        (datetime.datetime(2024, 1, 1, 10, 0, tzinfo=datetime.UTC), "a YAML timestamp (2024-01-01T10:00:00+00:00)"),
        ("soon", "'soon' is not a duration"),
        # Read as 90 s and as a negative span by pytimeparse (docs/dependencies.md says why it is not used).
        ("1:30", "'1:30' is not a duration such as 30, '30s', '15m' or '2h'"),
        ("-1h", "'-1h' is not a duration"),
    ],
)
def test_a_duration_that_cannot_be_waited_for_is_refused(value: object, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(value)
    assert says in str(info.value)
    assert len(str(info.value)) < 200  # a 400-digit value is not echoed


def test_plain_values_pass() -> None:
    doc = {"a": [1, 2.5, "x", True, None, {"b": -MAX_INTEGER}], "c": MAX_INTEGER, 3: "int keys are YAML's"}
    assert value_problems(doc) == []


def test_every_value_no_key_takes_is_found_with_its_key_path() -> None:
    doc = {
        "idle_time": math.nan,
        "providers": {"sim": {"settings": {"a": [1, math.inf], "when": datetime.date(2024, 1, 1)}}},
        "count": MAX_INTEGER + 1,
        "digits": OversizedNumber("9" * 5000),
        "blob": b"\x00",
        "set": {"a", "b"},
        "keyed": {datetime.date(2024, 1, 1): 1},
    }
    found = dict(value_problems(doc))
    assert found["idle_time"].startswith("not a number (.nan)")
    assert found["providers.sim.settings.a.1"].startswith("an infinite number")
    assert found["providers.sim.settings.when"].startswith("a YAML date (2024-01-01)")
    assert "out of range" in found["count"]
    assert "out of range" in found["digits"] and len(found["digits"]) < 200
    assert found["blob"].startswith("binary data")
    assert found["set"].startswith("a YAML set")
    assert found["keyed"].startswith("key 2024-01-01: a YAML date")
    assert len(found) == 8


def test_a_huge_number_is_shown_by_its_size() -> None:
    assert shown(10**5000) == "(an integer of 16610 bits)"  # str() would raise past 4300 digits
    assert shown(12) == "12" and shown("x" * 100).endswith("(102 characters)")
