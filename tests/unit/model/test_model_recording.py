"""The recording format (docs/recording.md) read as untrusted input."""

from __future__ import annotations

import json

import pytest

from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.recording import (
    DEMAND,
    Record,
    RecordingError,
    by_kind,
    demand_record,
    parse_line,
    read_records,
    snapshot_of,
    summarize,
)


def test_a_record_encodes_on_one_line_and_reads_back() -> None:
    snapshot = DemandSnapshot(7, 2, 0.0, (TemplateDemand("cpu", 3, pending_hosts=2, in_flight=1),))
    record = demand_record(snapshot, 100.5)
    line = record.encode()
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["v"] == 1 and doc["t"] == 100.5 and doc["kind"] == "demand"
    assert doc["templates"] == {"cpu": {"wanted": 3, "pending": 2, "inFlight": 1, "joined": 0, "idle": 0, "busy": 0}}
    assert parse_line(line, 1) == record
    assert snapshot_of(record) == DemandSnapshot(7, 2, 100.5, snapshot.templates)  # what a replay feeds the policy


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("not json", "line 3: not JSON"),
        ("[1]", "line 3: a record is a JSON object, not list"),
        ('{"v": 2, "t": 1, "kind": "demand"}', "line 3: version 2 is not 1"),
        ('{"v": 1, "t": -1, "kind": "demand"}', "line 3: t -1 is not a time"),
        ('{"v": 1, "t": "x", "kind": "demand"}', "line 3: t 'x' is not a time"),
        ('{"v": 1, "t": 1, "kind": "weather"}', "line 3: kind 'weather' is not one of demand"),
        (
            '{"v": 1, "t": 1, "kind": "demand", "term": 1, "seq": 1}',
            "line 3: demand record without a valid 'templates'",
        ),
        ('{"v": 1, "t": 1, "kind": "op", "op": "x", "provider": true, "event": "intent"}', "valid 'provider'"),
        (
            '{"v": 1, "t": 1, "kind": "demand", "term": 1, "seq": 1, "templates": {"cpu": {"wanted": -2}}}',
            "line 3: demand of 'cpu': wanted -2 is not a count",
        ),
    ],
)
def test_a_bad_line_is_named_by_its_number(line: str, said: str) -> None:
    good = Record(1.0, "host", {"host": "h1", "event": "joined"}).encode()
    with pytest.raises(RecordingError) as caught:
        list(read_records([good, "", line]))
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_summary_and_records_by_kind() -> None:
    records = [
        Record(10.0, DEMAND, {"term": 1, "seq": 1, "templates": {"cpu": {}}}),
        Record(5.0, "decision", {"decisions": [{"template": "gpu"}]}),
        Record(20.0, "op", {"op": "o", "provider": "p", "event": "intent", "template": "cpu"}),
    ]
    summary = summarize(records)
    assert (summary.first, summary.last, summary.records) == (5.0, 20.0, 3)
    assert summary.templates == ("cpu", "gpu")
    assert summary.to_json()["counts"]["notice"] == 0
    assert [r.t for r in by_kind(records, "op")] == [20.0]
