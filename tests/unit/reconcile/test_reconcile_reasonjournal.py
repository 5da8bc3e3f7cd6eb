"""The reasons journal (``<state_dir>/reasons.jsonl``) and ``xceprov explain`` over it.

What a user notices: a standing reason is written once, not every pass; a launch is always
written; a template whose demand is met says so once; a restarted daemon does not repeat what
the journal said last; the file stays bounded; ``explain`` filters by template and ``--since``
and names an unknown template in one line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.model.durations import since_time
from orchestrator.reconcile.reasonjournal import ReasonJournal, journal_path, read_journal
from orchestrator.reconcile.reasons import Reason
from orchestrator.sim.cloud.service import parse_since

QUOTA = Reason("cpu", "quota", "aws", until=1_800_000_600.0, detail="limit")
LAUNCH = Reason("cpu", "launched", "sim", count=2)


def test_a_standing_reason_is_written_once_and_launches_always(tmp_path: Path) -> None:
    journal = ReasonJournal(tmp_path)
    assert len(journal.record(100.0, {"cpu": [QUOTA]})) == 1
    assert journal.record(110.0, {"cpu": [QUOTA]}) == []  # unchanged: nothing written
    assert len(journal.record(120.0, {"cpu": [LAUNCH]})) == 1
    assert len(journal.record(130.0, {"cpu": [LAUNCH]})) == 1  # another launch
    assert [e.summary for e in journal.record(140.0, {})] == ["demand met: nothing held back"]
    assert journal.record(150.0, {}) == []
    entries = read_journal(tmp_path)
    assert [(e.time, [r.code for r in e.reasons]) for e in entries] == [
        (100.0, ["quota"]),
        (120.0, ["launched"]),
        (130.0, ["launched"]),
        (140.0, []),
    ]


def test_a_restarted_daemon_does_not_repeat_the_last_word(tmp_path: Path) -> None:
    ReasonJournal(tmp_path).record(100.0, {"cpu": [QUOTA]})
    assert ReasonJournal(tmp_path).record(200.0, {"cpu": [QUOTA]}) == []
    assert len(read_journal(tmp_path)) == 1


def test_the_journal_is_bounded_to_its_newest_lines(tmp_path: Path) -> None:
    journal = ReasonJournal(tmp_path, max_lines=10, max_bytes=1 << 20)
    for i in range(40):
        journal.record(float(i), {"cpu": [Reason("cpu", "launched", "sim", count=i + 1)]})
    entries = read_journal(tmp_path)
    assert len(entries) <= 10 and entries[-1].reasons[0].count == 40
    journal = ReasonJournal(tmp_path, max_lines=1000, max_bytes=2000)
    for i in range(40):
        journal.record(100.0 + i, {"cpu": [Reason("cpu", "launched", "sim", count=i + 1)]})
    assert journal_path(tmp_path).stat().st_size <= 2000


def site(tmp_path: Path) -> Path:
    config = tmp_path / "xceprov.yaml"
    config.write_text(
        json.dumps(
            {
                "cluster": "unit",
                "state_dir": str(tmp_path / "state"),
                "controller": {"ca": "system"},
                "providers": {"sim": {"module": "xcesim", "max_instances": 4}},
                "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
            }
        )
    )
    return config


def test_explain_shows_the_history_by_template_and_since(tmp_path: Path) -> None:
    config = site(tmp_path)
    now = time.time()
    journal = ReasonJournal(tmp_path / "state")
    journal.record(now - 7200, {"cpu": [QUOTA]})
    journal.record(now - 60, {"cpu": [LAUNCH], "old": [Reason("old", "cooldown")]})
    runner = CliRunner()
    out = runner.invoke(cli, ["--config", str(config), "explain", "cpu", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [e["reasons"][0]["code"] for e in doc["history"]] == ["quota", "launched"]
    assert doc["current"] == {}  # no daemon status yet
    recent = json.loads(runner.invoke(cli, ["--config", str(config), "explain", "--since", "1h", "--json"]).output)
    assert sorted((e["template"], e["reasons"][0]["code"]) for e in recent["history"]) == [
        ("cpu", "launched"),
        ("old", "cooldown"),
    ]
    text = runner.invoke(cli, ["--config", str(config), "explain", "cpu"]).output
    assert "cpu: quota on aws until" in text and "cpu: launched 2 on sim" in text
    assert "no daemon has run with this state_dir" in text
    unknown = runner.invoke(cli, ["--config", str(config), "explain", "gpu"])
    assert unknown.exit_code != 0 and "templates.gpu: no such template (known: cpu)" in unknown.output
    at = json.loads(
        runner.invoke(cli, ["--config", str(config), "explain", "--since", f"{now - 3600:.0f}", "--json"]).output
    )
    assert at["history"] == recent["history"]  # a Unix time: the same hour
    bad = runner.invoke(cli, ["--config", str(config), "explain", "--since", "soon"])
    assert bad.exit_code != 0 and "--since soon:" in bad.output


def test_since_is_a_unix_time_or_a_duration_back_from_now() -> None:
    assert since_time("1800000000", now=0.0) == 1_800_000_000.0
    assert since_time("30m", now=10_000.0) == 8_200.0
    assert parse_since("2h", now=10_000.0) == 2_800.0  # sim cloud requests --since takes the same
    for bad in ("soon", "-5", "inf"):
        with pytest.raises(ValueError, match="a Unix time in seconds, or a duration back from now"):
            since_time(bad, now=0.0)
