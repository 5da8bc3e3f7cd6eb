"""The first-boot benchmark's pure parts: one burst's row, the ratios against push, the verdicts."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import bench_firstboot
from bench.bench_firstboot import Cpu, burst_line, burst_row, main, ratios, verdicts

ZERO = Cpu(0.0, 0.0, 0.0, 0.0)


def row(label: str, per_host: float, all_joined: float, p50: float = 1.0, p95: float = 2.0) -> dict[str, Any]:
    mode = label.rsplit("-", 1)[0]
    return {
        "label": label,
        "mode": mode,
        "hosts": 20,
        "control_cpu_per_host_s": per_host,
        "submit_to_all_joined_s": all_joined,
        "join_p50_s": p50,
        "join_p95_s": p95,
        "hosts_core_share": 0.62,
        "cores": 2,
    }


def test_a_burst_row_counts_from_submission_and_per_joined_host() -> None:
    at_joined = Cpu(control=3.0, hosts=30.0, controller=1.0, machine=36.0)
    settled = Cpu(control=4.0, hosts=31.0, controller=1.2, machine=40.0)
    joined = [100.0 + s for s in (3.0, 1.0, 2.0, 10.0)]
    got = burst_row("first-boot-4", "first-boot", 4, 100.0, joined, 12.0, at_joined, settled, 2)
    assert (got["join_p50_s"], got["join_p95_s"], got["join_max_s"]) == (2.0, 10.0, 10.0)
    assert got["joined"] == 4 and got["submit_to_all_joined_s"] == 12.0
    # Per joined host: the settled control CPU (the play's tail after the join counted).
    assert got["control_cpu_per_host_s"] == 1.0 and got["control_cpu_to_joined_s"] == 3.0
    # The hosts' share of the cores from submission to the last join: 30 s of 2 x 12 core-seconds.
    assert got["hosts_core_share"] == 1.25 and got["machine_core_share"] == 1.5
    assert "first-boot-4: 4/4 joined" in burst_line(got) and "125 % of 2 cores" in burst_line(got)


def test_a_burst_where_nobody_joined_has_no_per_host_figure() -> None:
    got = burst_row("push-2", "push", 2, 0.0, [], 0.0, ZERO, ZERO, 2)
    assert got["joined"] == 0 and math.isnan(got["control_cpu_per_host_s"]) and math.isnan(got["join_p95_s"])


def test_cpu_differences_are_per_side() -> None:
    assert Cpu(5.0, 7.0, 2.0, 20.0) - Cpu(1.0, 2.0, 1.5, 10.0) == Cpu(4.0, 5.0, 0.5, 10.0)


def test_ratios_against_push_and_across_sizes() -> None:
    bursts = {
        "push-20": row("push-20", 1.2, 100.0),
        "first-boot-20": row("first-boot-20", 0.2, 30.0),
        "push-100": row("push-100", 1.5, 400.0),
        "first-boot-100": row("first-boot-100", 0.24, 50.0),
    }
    assert ratios(bursts) == {
        "cpu_per_host_fb_over_push_20": 0.167,
        "all_joined_fb_over_push_20": 0.3,
        "cpu_per_host_fb_over_push_100": 0.16,
        "all_joined_fb_over_push_100": 0.125,
        "cpu_per_host_fb_100_over_20": 1.2,
        "cpu_per_host_push_100_over_20": 1.25,
    }
    # Without push at the big size, its ratios are simply absent.
    del bursts["push-100"]
    assert "cpu_per_host_fb_over_push_100" not in ratios(bursts)
    assert ratios(bursts)["cpu_per_host_fb_100_over_20"] == 1.2


def test_each_target_is_judged_and_a_missing_figure_is_a_miss() -> None:
    bursts = {
        "push-20": row("push-20", 1.2, 100.0),
        "first-boot-20": row("first-boot-20", 0.2, 50.0),
        "first-boot-100": row("first-boot-100", 0.24, 50.0, p50=25.0, p95=61.0),
        "pool": {**row("pool-first-boot-10", 0.1, 9.0, p95=8.0), "hosts": 10},
    }
    results = {"hosts": 20, "scale": 100, "bursts": bursts, "ratios": ratios(bursts)}
    found = verdicts(results)
    assert [met for _, met in found] == [True, False, False, True, False, True]
    lines = [line for line, _ in found]
    assert lines[1] == "submission -> all 20 joined, first boot / push: 0.5 <= 0.4"
    assert lines[4].startswith(
        "first boot, 100 hosts: submission -> joined p95 (s) (the hosts used 62 % of the 2 cores)"
    )
    results["ratios"]["cpu_per_host_fb_over_push_20"] = float("nan")
    assert verdicts(results)[0][1] is False
    assert verdicts({"hosts": 20, "scale": 0, "bursts": {}, "ratios": {}}) == []


def test_check_fails_on_a_miss_and_reports_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bursts = {"push-20": row("push-20", 1.0, 100.0), "first-boot-20": row("first-boot-20", 0.5, 20.0)}
    measured = {"hosts": 20, "scale": 0, "bursts": bursts, "ratios": ratios(bursts)}
    monkeypatch.setattr(bench_firstboot, "can_run_hosts", lambda: True)
    monkeypatch.setattr(bench_firstboot, "run", lambda _args: measured)
    assert main([]) == 0
    assert main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "MISS: control CPU per joined host, first boot / push, 20 hosts: 0.5 <= 0.25" in out
    assert "PASS: submission -> all 20 joined, first boot / push: 0.2 <= 0.4" in out


def test_a_scale_not_above_the_burst_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--hosts", "20", "--scale", "20"])
    assert exc.value.code == 2
    assert "--scale: 20 must be more than --hosts (20)" in capsys.readouterr().err
