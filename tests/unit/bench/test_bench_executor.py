"""The executor benchmark: its targets and report, and one tiny real run so the bench cannot rot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import bench_executor
from bench.bench_executor import Burst, Verdict, describe, main, report, verdicts


def test_the_three_targets_are_judged_from_the_best_seconds() -> None:
    found = verdicts(500, 1000, {500: 11.0, 1000: 30.0}, {500: 10.0, 1000: 25.0})
    assert [(v.name, round(v.ratio, 2), v.target, v.met) for v in found] == [
        ("executor 500 / raw 500", 1.1, 1.15, True),
        ("executor 1000 / executor 500", 2.73, 2.2, False),
        ("executor 1000 / raw 1000 (one state)", 1.2, 0.8, False),
    ]


def test_the_scaling_target_follows_the_sizes() -> None:
    # 4 x the small size: linear is 4.0, the target 2.2 x 2.
    (_, scaling, _) = verdicts(3, 12, {3: 1.0, 12: 4.3}, {3: 1.0, 12: 1.0})
    assert scaling.target == pytest.approx(4.4) and scaling.met


def test_the_layout_names_the_states() -> None:
    assert describe([500]) == "1 state (500)"
    assert describe([250, 250, 250, 250]) == "4 states (250+250+250+250)"


def test_a_missed_target_fails_check_and_says_the_shards_are_awaited(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bursts = {n: Burst(n, s, 0.1, [n], {"terraform apply": s / 2}, "1.0") for n, s in ((5, 2.0), (10, 5.0))}
    measured = {"best": {"executor": bursts, "raw": {5: 1.9, 10: 4.0}}, "loads": ["1.0", "2.0"]}
    monkeypatch.setattr(bench_executor, "run", lambda *_a, **_k: measured)
    assert main(["--small", "5", "--large", "10", "--profile"]) == 0  # without --check: report only
    assert main(["--small", "5", "--large", "10", "--check"]) == 1
    out = capsys.readouterr().out
    assert "PASS: executor 5 / raw 5: 1.05" in out
    assert "MISS: executor 10 / raw 10 (one state): 1.25" in out
    assert "awaits the shard wiring" in out
    assert "profile N=10: intent/facts 0.00 s" in out and "terraform apply 2.50 s" in out


def test_met_targets_pass_check(monkeypatch: pytest.MonkeyPatch) -> None:
    bursts = {n: Burst(n, s, 0.1, [n // 2, n // 2], {}, "1.0") for n, s in ((4, 2.0), (8, 3.0))}
    measured = {"best": {"executor": bursts, "raw": {4: 2.0, 8: 4.0}}, "loads": ["1.0"]}
    monkeypatch.setattr(bench_executor, "run", lambda *_a, **_k: measured)
    assert main(["--small", "4", "--large", "8", "--check"]) == 0
    assert all(isinstance(v, Verdict) and v.met for v in report(4, 8, measured, profile=False))


@pytest.mark.integration
def test_a_tiny_real_run_through_controller_executor_and_raw_tool(capsys: pytest.CaptureFixture[str]) -> None:
    """Real controller (mutual TLS, lease), real Terraform, 2 and 3 instances, no warm-up."""
    measured = bench_executor.run(2, 3, rounds=1, profile=True, warmup=0)
    found = report(2, 3, measured, profile=True)
    out = capsys.readouterr().out
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["executor"]["3"]["states"] == [3]  # this branch's executor: one state
    profile = doc["executor"]["2"]["profile"]
    # Every controller round trip, plan, apply and the state read happened and were timed.
    for part in ("intent/facts", "rendering", "terraform plan", "terraform apply", "terraform output"):
        assert profile[part] > 0, part
    assert len(found) == 3 and all(v.ratio > 0 for v in found)
    assert "| 3 |" in out and "1 state (3)" in out
