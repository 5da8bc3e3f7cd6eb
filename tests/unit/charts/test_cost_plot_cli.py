"""``xceprov cost --plot FILE`` end to end: the chart beside the unchanged text or JSON, one line on
stderr saying where it went; a bad FILE refused in one line with exit 2 before the controller
is asked (docs/cost.md, "Charts"). The facts are a standalone site's journal, written here."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from orchestrator.model.costs import launch_detail
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.ops.facts import LocalFacts
from tests.sim_cloud_cli import run_cli as _run
from tests.sim_cloud_cli import write_sim_site

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
UNTIL = str(T0 + 7200)
SVG = "{http://www.w3.org/2000/svg}"


def launched(op_id: str, template: str, at: float) -> list[Fact]:
    key = instance_key(op_id, 0)
    when = datetime.fromtimestamp(at, tz=UTC).isoformat()
    return [
        Fact(FactKind.REQUEST_INTENT, "sim", op_id, Epoch(1, 1), template=template, count=1, committed=at),
        Fact(
            FactKind.INSTANCE_CREATED, "sim", op_id, Epoch(1, 1), instance_key=key, instance_id=f"i-{op_id}",
            template=template, host_name=f"h-{op_id}", detail=launch_detail({"launch_time": when}), committed=at,
        ),
    ]  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A standalone site of the shipped defaults whose journal holds a cpu instance that ran the
    first hour (0.34) and a gpu instance live from the second (3.06 up to UNTIL)."""
    config = write_sim_site(tmp_path)
    doc = yaml.safe_load(config.read_text())
    doc["standalone"] = True
    config.write_text(yaml.safe_dump(doc))
    returned = Fact(
        FactKind.RETURNED, "sim", "op-a", Epoch(1, 1), instance_key=instance_key("op-a", 0), committed=T0 + 3600
    )
    facts = [*launched("op-a", "cpu", T0), returned, *launched("op-b", "gpu", T0 + 3600)]
    LocalFacts(Path(doc["state_dir"]) / "facts" / f"{doc['cluster']}.jsonl").commit_many(facts)
    return config


@pytest.mark.parametrize("as_json", [False, True])
def test_the_chart_is_written_beside_the_unchanged_output(site: Path, tmp_path: Path, as_json: bool) -> None:
    flags = ("--json",) if as_json else ()
    code, plain, err = _run(site, "cost", "--until", UNTIL, "--by", "template", *flags)
    assert code == 0, err
    chart = tmp_path / "spend.svg"
    code, out, err = _run(site, "cost", "--until", UNTIL, "--by", "template", *flags, "--plot", str(chart))
    assert code == 0, err
    assert out == plain
    assert err.strip().splitlines() == [f"xceprov: wrote the chart of the spend by template to {chart}"]
    text = {"".join(t.itertext()) for t in ET.parse(chart).getroot().iter(f"{SVG}text")}
    assert {"cpu: 0.34", "gpu: 3.06"} <= text
    assert "spend by template, 2026-01-01 00:00 to 2026-01-01 02:00 UTC: total 3.40 over 2 instance(s)" in text


def test_a_png_by_group(site: Path, tmp_path: Path) -> None:
    code, _, err = _run(site, "cost", "--until", UNTIL, "--by", "group", "--plot", str(tmp_path / "groups.png"))
    assert code == 0, err
    assert (tmp_path / "groups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("spend.pdf", "spend.pdf: cannot write a chart as .pdf: name it .png or .svg"),
        ("missing/spend.png", "cannot write the chart: no directory"),
        ("old.svg", "old.svg: cannot write the chart: it is a directory"),
        ("spend", "spend: cannot write a chart without a suffix: name it .png or .svg"),
    ],
)
def test_a_bad_file_is_one_line_and_exit_2_before_the_controller(tmp_path: Path, name: str, message: str) -> None:
    # Not standalone, and no controller answers: a bad --plot is refused first (2, not 75).
    config = write_sim_site(tmp_path)
    (tmp_path / "old.svg").mkdir()
    code, out, err = _run(config, "cost", "--plot", str(tmp_path / name))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.svg", "xceprov.yaml"]
    assert list((tmp_path / "old.svg").iterdir()) == []


@pytest.mark.parametrize("where", ["a directory", "proc"])
def test_a_file_it_cannot_write_is_one_line_exit_2_and_nothing_half_written(
    site: Path, tmp_path: Path, where: str
) -> None:
    if where == "proc":  # a directory no one may create a file in, root included
        target = Path("/proc") / "spend.svg"
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc here")
        message = f"{target}: cannot write the chart: "
    else:
        target = tmp_path / "spend.svg"
        target.mkdir()
        message = f"{target}: cannot write the chart: it is a directory"
    code, out, err = _run(site, "cost", "--until", UNTIL, "--plot", str(target))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".spend")]
