"""``write_cost_chart`` (``xceprov cost --plot``): cumulative spend per group over the period,
each curve ending at the total ``xceprov cost`` prints (docs/cost.md, "Charts")."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from orchestrator.charts import ChartError, write_cost_chart
from orchestrator.charts.spend import MOST, spend_series
from orchestrator.model.costs import CostItem, totals

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
H = 3600.0
SVG = "{http://www.w3.org/2000/svg}"


def item(n: int, template: str, groups: tuple[str, ...], start: float, end: float | None, cost: float) -> CostItem:
    return CostItem(f"op-{n}-000", f"op-{n}", "sim", template, "c8", groups, f"i-{n}", start, end, 0.0, 0.0, cost)


# cpu: 0 to 1 h, 1.0; gpu: from 0.5 h, live, 3.0 up to 2 h (2.0 a hour); cpu2: 1 h to 2 h, 0.5.
ITEMS = [
    item(1, "cpu", ("batch", "short"), T0, T0 + H, 1.0),
    item(2, "gpu", (), T0 + 0.5 * H, None, 3.0),
    item(3, "cpu", ("batch",), T0 + H, T0 + 2 * H, 0.5),
]


def at(series: tuple[float, ...], times: tuple[float, ...], t: float) -> float:
    return series[times.index(t)]


def test_each_item_is_spread_over_its_life_and_stacks_to_the_total() -> None:
    found = spend_series(ITEMS, 0.0, T0 + 2 * H, "template")
    assert found.stacked and list(found.by_name) == ["gpu", "cpu"]  # largest first
    assert found.times == (T0, T0 + 0.5 * H, T0 + H, T0 + 2 * H)  # from the first launch (no --since)
    assert found.by_name["cpu"] == pytest.approx((0.0, 0.5, 1.0, 1.5))
    assert found.by_name["gpu"] == pytest.approx((0.0, 0.0, 1.0, 3.0))
    assert found.total == pytest.approx((0.0, 0.5, 2.0, 4.5))
    ends = {name: values[-1] for name, values in found.by_name.items()}
    assert ends == pytest.approx(totals(ITEMS, "template"))


def test_since_starts_the_chart_and_clips_each_life() -> None:
    # The ledger clips the items' money to the period; the chart spreads it over the clipped life.
    clipped = [item(2, "gpu", (), T0 + 0.5 * H, None, 2.0)]
    found = spend_series(clipped, T0 + H, T0 + 2 * H, "provider")
    assert found.times == (T0 + H, T0 + 2 * H) and found.by_name["sim"] == pytest.approx((0.0, 2.0))


def test_by_group_an_instance_counts_under_each_and_the_total_once() -> None:
    found = spend_series(ITEMS, 0.0, T0 + 2 * H, "group")
    assert not found.stacked
    ends = {name: values[-1] for name, values in found.by_name.items()}
    assert ends == pytest.approx({"-": 3.0, "batch": 1.5, "short": 1.0})
    assert found.total[-1] == pytest.approx(4.5)


def test_past_the_most_groups_the_rest_are_one() -> None:
    many = [item(n, f"t{n:02d}", ("g",), T0, T0 + H, float(n)) for n in range(1, MOST + 4)]
    found = spend_series(many, 0.0, T0 + H, "template")
    names = list(found.by_name)
    assert len(names) == MOST and names[-1] == "4 others" and names[0] == f"t{MOST + 3:02d}"
    assert found.by_name["4 others"][-1] == pytest.approx(1 + 2 + 3 + 4)
    assert sum(v[-1] for v in found.by_name.values()) == pytest.approx(found.total[-1])


def test_the_chart_names_each_group_with_its_total(tmp_path: Path) -> None:
    write_cost_chart(ITEMS, tmp_path / "cost.svg", 0.0, T0 + 2 * H, "template")
    text = {"".join(t.itertext()) for t in ET.parse(tmp_path / "cost.svg").getroot().iter(f"{SVG}text")}
    assert {"cpu: 1.50", "gpu: 3.00", "template", "time (UTC)"} <= text
    assert "spend by template, 2026-01-01 00:00 to 2026-01-01 02:00 UTC: total 4.50 over 3 instance(s)" in text
    write_cost_chart(ITEMS, tmp_path / "group.svg", 0.0, T0 + 2 * H, "group")
    text = {"".join(t.itertext()) for t in ET.parse(tmp_path / "group.svg").getroot().iter(f"{SVG}text")}
    assert {"batch: 1.50", "short: 1.00", "-: 3.00", "total: 4.50"} <= text


def test_a_period_with_nothing_says_so(tmp_path: Path) -> None:
    write_cost_chart([], tmp_path / "cost.png", T0, T0 + H, "provider")
    assert (tmp_path / "cost.png").read_bytes()[:4] == b"\x89PNG"
    write_cost_chart([], tmp_path / "cost.svg", T0, T0 + H, "provider")
    text = {"".join(t.itertext()) for t in ET.parse(tmp_path / "cost.svg").getroot().iter(f"{SVG}text")}
    assert "nothing cost anything in the period" in text


def test_the_same_items_make_the_same_bytes(tmp_path: Path) -> None:
    for name in ("a.svg", "b.svg"):
        write_cost_chart(ITEMS, tmp_path / name, 0.0, T0 + 2 * H, "op")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_bad_by_and_bad_suffix_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ChartError, match="cannot chart costs by 'flavor'"):
        write_cost_chart(ITEMS, tmp_path / "cost.svg", 0.0, T0 + 2 * H, "flavor")
    with pytest.raises(ValueError, match=r"cost\.jpg: cannot write a chart as \.jpg"):
        write_cost_chart(ITEMS, tmp_path / "cost.jpg", 0.0, T0 + 2 * H, "op")
    assert list(tmp_path.iterdir()) == []
