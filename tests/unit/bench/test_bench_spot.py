"""The spot benchmark's pure parts: one mode's row and the verdicts (notice → closed, replaced, losses)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.bench_spot import main, mode_row, verdicts

T = 1_000.0


def test_a_mode_row_measures_from_the_cloud_s_notice_time() -> None:
    row = mode_row(
        "first-boot",
        2,
        120.0,
        noticed_at={"a": T, "b": T + 1},
        closed_at={"a": T + 4, "b": T + 7},
        reclaim_at=T + 120,
        replacement_joins=[T + 60, T + 90, T + 200],  # the last one came after the reclaim
        losses={"a": 1, "b": 1},
    )
    assert row["notice_to_closed_p95_s"] == 6.0 and row["notice_to_closed_max_s"] == 6.0
    assert row["replaced_before_reclaim"] == 2 and row["replacement_join_max_s"] == 90.0 and row["margin_s"] == 30.0
    assert row["losses_recorded"] == 2 and row["losses_twice"] == []
    assert all(met for _, met in verdicts({"modes": {"first-boot": row}}))


def test_the_verdicts_miss_a_slow_close_a_late_replacement_and_a_loss_recorded_twice() -> None:
    row = mode_row(
        "push",
        2,
        120.0,
        noticed_at={"a": T, "b": T},
        closed_at={"a": T + 3, "b": T + 30},
        reclaim_at=T + 120,
        replacement_joins=[T + 100],
        losses={"a": 2, "b": 1},
    )
    found = dict(verdicts({"modes": {"push": row}}))
    assert [met for met in found.values()] == [False, False, False]
    assert any("notice -> closed p95 30.0 s" in line for line in found)


def test_bad_arguments_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--modes", "pull"])
    assert info.value.code == 2 and "--modes takes push and first-boot" in capsys.readouterr().err
