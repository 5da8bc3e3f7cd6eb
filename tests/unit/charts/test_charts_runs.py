"""``write_run_chart`` (``xceprov replay --plot``): runs side by side in PNG or SVG by the file's
suffix, each run's label and totals as text, the same bytes for the same runs, and a path it
cannot write refused in one line with nothing left behind (docs/replay.md, "Charts")."""

from __future__ import annotations

import errno
import os
import struct
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from orchestrator.charts import ChartError, write_run_chart
from orchestrator.charts import runs as runs_module
from orchestrator.charts.runs import COLUMN_WIDTH, HEIGHT
from orchestrator.errors import UsageError
from orchestrator.replay.figures import RunFigures, Sample

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SVG = "{http://www.w3.org/2000/svg}"


def run(label: str, cost: float, lag: int) -> RunFigures:
    samples = [
        Sample(T0 + i * 60, demand=(i // 10) % 5, supply=max(0, (i // 10) % 5 - lag), spend=i * cost / 119)
        for i in range(120)
    ]
    return RunFigures(label, T0, T0 + 7200, cost, 3.25, 56.0, 5, 4, 0, {}, samples)


RUNS = [run("recorded", 1.2, 0), run("replayed", 2.4, 1)]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_a_png_has_a_column_per_run_at_100_dpi(tmp_path: Path) -> None:
    write_run_chart(RUNS, tmp_path / "runs.png", title="what if")
    assert png_size((tmp_path / "runs.png").read_bytes()) == (COLUMN_WIDTH * 2 * 100, HEIGHT * 100)
    write_run_chart(RUNS[:1], tmp_path / "one.PNG")  # the suffix in any case
    assert png_size((tmp_path / "one.PNG").read_bytes()) == (COLUMN_WIDTH * 100, HEIGHT * 100)


def test_an_svg_has_two_rows_of_axes_per_run_and_the_totals_as_text(tmp_path: Path) -> None:
    write_run_chart(RUNS, tmp_path / "runs.svg", title="what if")
    root = ET.parse(tmp_path / "runs.svg").getroot()
    ids = {g.get("id") for g in root.iter(f"{SVG}g")}
    assert {i for i in ids if i and i.startswith("run-")} == {
        "run-0-hosts",
        "run-0-spend",
        "run-1-hosts",
        "run-1-spend",
    }
    text = {"".join(t.itertext()) for t in root.iter(f"{SVG}text")}
    assert {"recorded", "replayed", "what if"} <= text
    assert "cost 1.20, 3.2 host-hours, 56 pending host-minutes" in text
    assert "cost 2.40, 3.2 host-hours, 56 pending host-minutes" in text
    assert {"demand (hosts of work)", "supply (instances live)", "time (UTC)"} <= text


def test_each_row_shares_one_y_scale_from_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[Figure] = []

    def keep(path: Path, width: float, height: float, draw: Callable[[Figure], None]) -> None:
        figure = Figure()
        draw(figure)
        drawn.append(figure)

    monkeypatch.setattr(runs_module, "render", keep)
    write_run_chart(RUNS, tmp_path / "runs.png")
    [figure] = drawn
    by_id = {axes.get_gid(): axes for axes in figure.axes}
    for row, highest in (("hosts", 4), ("spend", 2.4)):
        left, right = by_id[f"run-0-{row}"].get_ylim(), by_id[f"run-1-{row}"].get_ylim()
        assert left == right and left[0] == 0 and left[1] >= highest


def test_the_same_runs_make_the_same_bytes(tmp_path: Path) -> None:
    for name in ("a.svg", "b.svg", "a.png", "b.png"):
        write_run_chart(RUNS, tmp_path / name)
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert b"<dc:date>" not in (tmp_path / "a.svg").read_bytes()


def test_a_run_without_samples_says_so(tmp_path: Path) -> None:
    empty = RunFigures("replayed", T0, T0, 0.0, 0.0, 0.0, 0, 0, 0)
    write_run_chart([RUNS[0], empty], tmp_path / "runs.svg")
    root = ET.parse(tmp_path / "runs.svg").getroot()
    assert "no samples" in {"".join(t.itertext()) for t in root.iter(f"{SVG}text")}


@pytest.mark.parametrize("name", ["runs.pdf", "runs", "runs.png.txt"])
def test_another_suffix_is_one_line_and_writes_nothing(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"name it \.png or \.svg") as caught:
        write_run_chart(RUNS, tmp_path / name)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    assert "\n" not in str(caught.value) and list(tmp_path.iterdir()) == []


def test_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ChartError, match="no run to chart"):
        write_run_chart([], tmp_path / "runs.png")


def test_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    with pytest.raises(ChartError, match="no directory"):
        write_run_chart(RUNS, tmp_path / "typo" / "runs.png")
    assert not (tmp_path / "typo").exists()


def test_a_directory_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs.svg").mkdir()
    with pytest.raises(ChartError, match=r"runs\.svg: cannot write the chart: it is a directory"):
        write_run_chart(RUNS, tmp_path / "runs.svg")


def test_a_failed_write_leaves_the_old_chart_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "runs.svg"
    target.write_text("old")

    def full_disk(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ChartError) as caught:
        write_run_chart(RUNS, target)
    assert str(caught.value) == f"{target}: cannot write the chart: No space left on device"
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["runs.svg"]


def test_an_old_chart_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "runs.svg"
    target.write_text("old")
    write_run_chart(RUNS, target)
    assert target.read_bytes().startswith(b"<?xml") and [p.name for p in tmp_path.iterdir()] == ["runs.svg"]
    assert target.stat().st_mode & 0o777 == 0o644
