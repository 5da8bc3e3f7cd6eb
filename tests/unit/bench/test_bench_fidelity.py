"""The fidelity benchmark's pure parts: the workload model, the figures read, the comparisons."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.bench_fidelity import candidate, parse, period
from bench.fidelity_model import (
    DURATION,
    HOSTS,
    JOIN_ALLOWANCE,
    TAIL,
    bill_figures,
    clipped_figures,
    compare,
    quiet_gap,
    real_figures,
    replay_runs,
    table,
    verdicts,
    workload,
)


def test_the_workload_is_seeded_and_its_quiet_gaps_lie_between_the_two_idle_times() -> None:
    one, again = workload(30, 60, 240, seed=7), workload(30, 60, 240, seed=7)
    assert one == again and one != workload(30, 60, 240, seed=8)
    low, high = quiet_gap(60, 240)
    assert 60 < low < high < 240
    for earlier, later in zip(one.bursts, one.bursts[1:], strict=False):
        ends = [w.at + w.duration + JOIN_ALLOWANCE for w in one.works if earlier <= w.at < later]
        assert low <= later - max(ends) <= high  # hosts idle longer than A, shorter than B
    assert all(HOSTS[0] <= w.hosts <= HOSTS[1] and DURATION[0] <= w.duration <= DURATION[1] for w in one.works)


def test_the_period_scales_the_bursts_not_the_work_and_the_run_ends_after_every_return() -> None:
    short, long = workload(10, 60, 240), workload(60, 60, 240)
    assert len(long.bursts) > 3 * len(short.bursts) >= 3
    assert long.bursts[-1] < 60 * 60 <= long.bursts[-1] + 600
    last = max(w.at + w.duration + JOIN_ALLOWANCE for w in long.works)
    assert long.end == pytest.approx(last + 240 + TAIL, abs=0.1)
    assert 0.25 * 3600 == long.refuse_from < long.notice_at - 45 < long.end
    assert long.notice_at - 45 in long.bursts  # the notice comes while a burst runs


def test_idle_times_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="0 < A < B"):
        workload(10, 240, 60)
    with pytest.raises(SystemExit):
        parse(["--idle-a", "300", "--idle-b", "60"])


def test_quick_shortens_what_is_not_given() -> None:
    args = parse(["--quick", "--idle-b", "200"])
    assert (args.minutes, args.idle_a, args.idle_b) == (6.0, 30.0, 200.0)


def test_what_happened_is_the_cost_total_and_the_instances_seconds() -> None:
    doc = {
        "total": 0.5,
        "instances": [{"running_seconds": 3600.0, "stopped_seconds": 0.0}, {"running_seconds": 1800.0}],
    }
    assert real_figures(doc) == {"cost": 0.5, "host_hours": 1.5, "instances": 2}


def test_the_replay_figures_are_found_by_key_or_by_label() -> None:
    fig = {"cost": 1.0, "host_hours": 2.0, "launches": 3}
    assert replay_runs({"recorded": {**fig, "label": "recorded"}, "replayed": fig})["replayed"]["host_hours"] == 2.0
    nested = {"runs": [{**fig, "label": "recorded"}, {**fig, "cost": 4.0, "label": "replayed"}]}
    assert replay_runs(nested)["replayed"]["cost"] == 4.0 and replay_runs(nested)["recorded"]["cost"] == 1.0


def test_the_checks_pass_within_the_targets_and_miss_outside_them() -> None:
    real_a, real_b = {"host_hours": 2.0, "cost": 0.40}, {"host_hours": 3.0, "cost": 0.60}
    good = compare(real_a, real_b, {"host_hours": 2.08, "cost": 0.41}, {"host_hours": 3.0, "cost": 0.60})
    assert good["host_hours"]["change_error"] == pytest.approx(0.08)
    assert all(met for _, met in verdicts(good))
    # 6 % off with the same configuration; the change the other way round.
    bad = compare(real_a, real_b, {"host_hours": 2.12, "cost": 0.40}, {"host_hours": 1.9, "cost": 0.30})
    found = [met for _, met in verdicts(bad)]
    assert found == [False, False, False, True, False, False]


def test_no_real_change_is_not_a_direction_matched() -> None:
    same = {"host_hours": 2.0, "cost": 0.4}
    found = compare(same, same, same, {"host_hours": 2.1, "cost": 0.4})
    assert not found["host_hours"]["same_direction"] and math.isnan(found["host_hours"]["change_error"])
    assert [met for _, met in verdicts(found)][1:3] == [False, False]


def test_real_figures_clipped_to_a_window_count_each_instance_inside_it_at_its_own_price() -> None:
    doc = {
        "since": 0.0,
        "until": 1000.0,
        "instances": [
            {"start": 100.0, "end": 400.0, "cost": 0.3},  # 300 s
            {"start": 600.0, "end": None, "cost": 0.8},  # live at the end: 400 s
            {"start": 950.0, "end": 990.0, "cost": 0.04},  # after the window
        ],
    }
    found = clipped_figures(doc, 0.0, 800.0)
    assert found == {
        "cost": pytest.approx(0.3 + 0.4),
        "host_hours": pytest.approx(500 / 3600, abs=1e-6),
        "instances": 2,
    }
    assert clipped_figures(doc, 0.0, 1000.0)["host_hours"] == pytest.approx(740 / 3600, abs=1e-6)


def test_the_cloud_s_bill_is_read_from_its_total() -> None:
    bill = {"total": {"cost": 0.25, "instances": 2, "running_seconds": 1800.0}, "instances": []}
    assert bill_figures(bill) == {"cost": 0.25, "host_hours": 0.5}


def test_a_candidate_is_the_site_s_configuration_with_the_other_idle_time(tmp_path: Path) -> None:
    site = tmp_path / "xceprov.yaml"
    cfg = {
        "providers": {"sim": {"idle_time": "60s", "hold_time": "0s"}},
        "templates": {"fb": {"providers": {"sim": {"image": "bake:newest"}}, "bootstrap": {"mode": "first-boot"}}},
    }
    site.write_text(yaml.safe_dump(cfg))
    out = yaml.safe_load(candidate(site, 240.0, tmp_path / "b.yaml").read_text())
    assert out == {**cfg, "providers": {"sim": {"idle_time": "240s", "hold_time": "0s"}}}
    assert yaml.safe_load(candidate(site, None, tmp_path / "a.yaml").read_text()) == cfg


def test_the_period_compared_is_the_replay_s_within_the_run() -> None:
    real = {"a": {"t0": 1000, "end": 5000}}
    assert period(real, {"start": 1000.0, "end": 4500.5}) == (0.0, 3500.5)
    assert period(real, {}) == (0.0, 4000.0)


def test_the_predicted_change_is_the_printed_one_replayed_b_less_recorded_a() -> None:
    real_a, real_b = {"host_hours": 2.0, "cost": 0.40}, {"host_hours": 3.0, "cost": 0.60}
    recorded = {"host_hours": 2.0, "cost": 0.40}
    # The replay under A runs 10 % short: the model change carries it, the printed one does not.
    found = compare(real_a, real_b, {"host_hours": 1.8, "cost": 0.36}, {"host_hours": 3.0, "cost": 0.6}, recorded)
    row = found["host_hours"]
    assert row["predicted_change"] == pytest.approx(1.0) and row["change_error"] == 0.0
    assert row["model_change"] == pytest.approx(1.2) and row["model_change_error"] == pytest.approx(0.2)
    assert [met for _, met in verdicts(found)] == [False, True, True, False, True, True]
    assert "| host-hours | 2.0000 | 3.0000 | +1.0000 | 2.0000 | 1.8000 (10.0 %)" in table(found)
