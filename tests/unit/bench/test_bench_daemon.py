"""The daemon benchmark: its verdicts and options, and one tiny real run so the bench cannot rot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import bench_daemon
from bench.bench_daemon import Marks, main, verdicts

MEASURED: dict[str, Any] = {
    "push": {"median_s": 1.2, "max_s": 2.5, "split_median_s": {}, "rounds": []},
    "idle": {"cpu_s": 0.1, "seconds": 60.0, "share_pct": 0.17, "processes": 2},
    "burst": {"hosts": 500, "sent_p99_pct": 3.2},
}


def test_each_target_is_judged() -> None:
    assert [met for _, met in verdicts(MEASURED)] == [False, True, True]
    assert verdicts({"pass": {"live": 1000}}) == []  # recorded, no target


def test_check_fails_on_a_miss_and_reports_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_daemon, "run", lambda _args: MEASURED)
    assert main([]) == 0
    assert main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "MISS: push -> create: max 2.5 s (median 1.2) <= 2.0 s" in out
    assert "PASS: idle: 0.17 % of a core <= 1 %" in out
    monkeypatch.setattr(bench_daemon, "run", lambda _args: {"idle": MEASURED["idle"]})
    assert main(["--only", "idle", "--check"]) == 0


def test_an_unknown_sub_benchmark_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--only", "push,lease"])
    assert exc.value.code == 2
    assert "--only: unknown sub-benchmark lease" in capsys.readouterr().err


def test_marks_give_the_first_of_each_after_a_start() -> None:
    marks = Marks()
    marks.marks = [("pass start", 1.0), ("pass start", 5.0), ("apply start", 6.0), ("apply start", 7.0)]
    assert marks.first_after(4.0) == {"pass start": 1.0, "apply start": 2.0}
    assert marks.count("apply start") == 2


@pytest.mark.integration
def test_a_tiny_real_run_of_every_sub_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """A real world and daemon: one push, 2 s idle, a burst of 3, two no-op passes over 4 hosts."""
    args = argparse.Namespace(
        only=list(bench_daemon.SUBS), rounds=1, idle_seconds=2.0, burst=3, live=4, passes=2, interval=60.0
    )
    found = bench_daemon.run(args)
    assert found["push"]["max_s"] > 0 and "pass start" in found["push"]["split_median_s"]
    assert found["idle"]["processes"] >= 2  # the daemon and its lease keeper
    assert found["burst"]["hosts"] == 3 and found["burst"]["interval_s"] > 0
    assert found["pass"]["live"] == 4 and found["pass"]["passes"] == 2
    assert json.dumps(found)
    assert "pass over 4 live" in capsys.readouterr().out
