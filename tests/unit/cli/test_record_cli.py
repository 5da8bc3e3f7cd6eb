"""``xceprov record export|show``: a period in time order, and bad input as one line with an exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.model.recording import Record, read_records
from orchestrator.workspace.recordings import SegmentWriter

T0 = 1_800_000_000.0


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A configuration whose state directory holds two segments of host records at T0 + 0..250 s."""
    path = tmp_path / "xceprov.yaml"
    path.write_text(
        json.dumps(
            {
                "cluster": "unit",
                "state_dir": str(tmp_path / "state"),
                "controller": {"ca": "system"},
                "providers": {"sim": {"module": "xcesim"}},
                "templates": {"cpu": {"providers": {"sim": {"flavor": "c8", "image": "debian-12"}}}},
            }
        )
    )
    now = [T0]
    writer = SegmentWriter(tmp_path / "state" / "recordings", lambda: now[0], segment=100)
    for t in (0, 50, 120, 250):
        now[0] = T0 + t
        writer.write(Record(now[0], "host", {"host": f"h{t}", "event": "joined", "template": "cpu"}))
    writer.close()
    return path


def run(*args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(cli, list(args))
    return out.exit_code, out.stdout, out.stderr


def test_export_of_a_period_to_stdout_and_to_a_file(site: Path, tmp_path: Path) -> None:
    code, stdout, _ = run("--config", str(site), "record", "export", "--since", str(T0 + 40), "--until", str(T0 + 200))
    assert code == 0
    assert [r.data["host"] for r in read_records(stdout.splitlines())] == ["h50", "h120"]
    target = tmp_path / "all.jsonl"
    code, stdout, _ = run("--config", str(site), "record", "export", "-o", str(target))
    assert code == 0 and "all.jsonl: 4 records" in stdout
    code, stdout, _ = run("record", "show", str(target), "--json")
    summary = json.loads(stdout)
    assert code == 0 and summary["counts"]["host"] == 4 and summary["templates"] == ["cpu"]
    assert (summary["first"], summary["last"]) == (T0, T0 + 250)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["export", "--since", "yesterday"], "--since yesterday: 'yesterday' is not"),
        (["export", "--since", "1h", "--until", "2h"], "is before --since"),
    ],
)
def test_export_refuses_a_bad_period_in_one_line(site: Path, args: list[str], said: str) -> None:
    code, stdout, stderr = run("--config", str(site), "record", *args)
    assert code == 2 and stdout == ""
    assert said in stderr and len(stderr.strip().splitlines()) == 1


def test_show_names_the_file_and_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(Record(T0, "host", {"host": "h", "event": "joined"}).encode() + "\n{not json\n")
    code, _, stderr = run("record", "show", str(bad))
    assert code == 2 and f"{bad}: line 2: not JSON" in stderr and len(stderr.strip().splitlines()) == 1
    code, _, stderr = run("record", "show", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "missing.jsonl: not readable" in stderr
