"""``xceprov replay``: a trace and a recording replayed through the real pass, side by side, and
bad input as one line with exit 2; the site's own state is never touched."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.workspace.recordings import load_recording

# 2024-01-01T00:00:00Z; three jobs of one to two hosts, ten to twenty minutes each.
TRACE = """; UnixStartTime: 1704067200
1 0 -1 600 8 -1 -1 8 -1 -1 1 1 -1 -1 1 1 -1 -1
2 120 -1 1200 16 -1 -1 16 -1 -1 1 2 -1 -1 1 1 -1 -1
3 1800 -1 900 8 -1 -1 8 -1 -1 1 3 -1 -1 1 1 -1 -1
"""


DEMAND = '{"v": 1, "t": 5, "kind": "demand", "term": 1, "seq": 1, "templates": {}}\n'


def site(tmp_path: Path, idle_time: str = "60s", ca: str = "system") -> Path:
    path = tmp_path / f"site-{idle_time}.yaml"
    path.write_text(
        json.dumps(
            {
                "cluster": "unit",
                "state_dir": str(tmp_path / "state"),
                "controller": {"ca": ca},
                "daemon": {"reconcile_interval": "60s"},
                "providers": {"sim": {"module": "xcesim", "max_instances": 10, "idle_time": idle_time}},
                "templates": {
                    "cpu": {
                        "xce": {"slots": 8},
                        "providers": {"sim": {"flavor": "c8", "image": "debian-12", "cost_per_hour": 0.5}},
                    }
                },
            }
        )
    )
    return path


def run(*args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(cli, list(args))
    return out.exit_code, out.stdout, out.stderr


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "three.swf"
    path.write_text(TRACE)
    return path


def test_a_trace_replays_through_the_real_pass(tmp_path: Path, trace: Path) -> None:
    code, stdout, _ = run("replay", str(trace), "--config", str(site(tmp_path)), "--json")
    assert code == 0
    found = json.loads(stdout)
    replayed = found["replayed"]
    assert found["recorded"] is None and found["source"]["kind"] == "swf" and found["source"]["jobs"] == 3
    # Every job's hosts were launched, and all of them returned once idle (one host, two, one:
    # the first job's host may serve the third one).
    assert 3 <= replayed["launches"] <= 4 and replayed["returns"] == replayed["launches"]
    assert replayed["lost"] == 0 and replayed["host_hours"] > 0
    assert replayed["cost"] == pytest.approx(replayed["host_hours"] * 0.5, rel=1e-6)
    assert replayed["samples"] and max(s["supply"] for s in replayed["samples"]) >= 2
    assert replayed["by_template"]["cpu"]["launches"] == replayed["launches"]
    # The site's own state directory was never made: the replay ran in a throw-away one.
    assert not (tmp_path / "state").exists()


def test_text_is_a_table_and_a_recording_replays_beside_what_happened(tmp_path: Path, trace: Path) -> None:
    config = site(tmp_path)
    recording = tmp_path / "rec.jsonl.gz"
    code, stdout, stderr = run("replay", str(trace), "--config", str(config), "--record", str(recording))
    assert code == 0, stderr
    assert "replayed" in stdout and "cost" in stdout and "pending host-minutes" in stdout
    kinds = {r.kind for r in load_recording(recording)}
    assert {"config", "demand", "decision", "op", "host"} <= kinds
    code, stdout, _ = run("replay", str(recording), "--config", str(config), "--json")
    assert code == 0
    found = json.loads(stdout)
    assert found["source"]["kind"] == "recording"
    recorded, replayed = found["recorded"], found["replayed"]
    # The same configuration on the world the recording saw: the same hosts, near the same cost.
    assert replayed["launches"] == recorded["launches"] and replayed["returns"] == recorded["returns"]
    assert replayed["cost"] == pytest.approx(recorded["cost"], rel=0.05)
    assert set(found["changes"]) == {"cost", "host_hours", "pending_host_minutes", "launches", "returns", "lost"}
    code, stdout, _ = run("replay", str(recording), "--config", str(config))
    assert code == 0 and "recorded" in stdout and "change" in stdout


def test_a_longer_idle_time_costs_more(tmp_path: Path, trace: Path) -> None:
    costs = []
    for idle in ("60s", "30m"):
        code, stdout, _ = run("replay", str(trace), "--config", str(site(tmp_path, idle)), "--json")
        assert code == 0
        costs.append(json.loads(stdout)["replayed"]["host_hours"])
    assert costs[1] > costs[0]


def test_the_site_s_secrets_are_not_needed(tmp_path: Path, trace: Path) -> None:
    config = site(tmp_path, ca=str(tmp_path / "no-such-ca.pem"))
    code, stdout, stderr = run("replay", str(trace), "--config", str(config), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["replayed"]["launches"] >= 3


def test_a_chart_is_written(tmp_path: Path, trace: Path) -> None:
    chart = tmp_path / "runs.svg"
    code, _, stderr = run("replay", str(trace), "--config", str(site(tmp_path)), "--plot", str(chart))
    assert code == 0 and chart.read_text().lstrip().startswith("<?xml") and "runs.svg" in stderr


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("hello world\n", (), "neither a recording"),
        ("", (), "empty"),
        ('{"v": 1, "t": 5, "kind": "weather"}\n', (), "line 1"),
        ("1 0 -1 ten 8 -1 -1 8 -1 -1 1 1 -1 -1 1 1 -1 -1\n", (), "line 1"),
        (TRACE, ("--template", "gpu"), "--template gpu"),
        (TRACE, ("--plot", "out.pdf"), ".png or .svg"),
        (DEMAND, ("--template", "cpu"), "--template"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: str, extra: tuple[str, ...], message: str) -> None:
    source = tmp_path / "source"
    source.write_text(content)
    code, _, stderr = run("replay", str(source), "--config", str(site(tmp_path)), *extra)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not (tmp_path / "state").exists()


def test_a_gzip_trace_and_a_missing_file(tmp_path: Path) -> None:
    packed = tmp_path / "three.swf.gz"
    packed.write_bytes(gzip.compress(TRACE.encode()))
    code, stdout, _ = run("replay", str(packed), "--config", str(site(tmp_path)), "--json")
    assert code == 0 and json.loads(stdout)["source"]["jobs"] == 3
    code, _, stderr = run("replay", str(tmp_path / "nope.swf"), "--config", str(site(tmp_path)))
    assert code == 2 and "no such file" in stderr


def test_a_select_template_is_refused_in_one_line(tmp_path: Path, trace: Path) -> None:
    config = site(tmp_path)
    data = json.loads(config.read_text())
    data["templates"]["cpu"]["providers"]["sim"] = {"select": {"cpus": {"min": 8}}, "image": "debian-12"}
    config.write_text(json.dumps(data))
    code, _, stderr = run("replay", str(trace), "--config", str(config))
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "templates.cpu.providers.sim.select: a replay cannot read the provider's catalogue" in stderr


def test_first_boot_hosts_on_the_newest_bake_replay_without_the_site_s_key_or_bakes(
    tmp_path: Path, trace: Path
) -> None:
    # The site's join key is not on this machine and the model cloud holds no bake: the replay
    # mints its hosts' tokens with a key of its own and names the bake; the site's key is not read.
    config = site(tmp_path)
    data = json.loads(config.read_text())
    data["controller"]["join_key"] = str(tmp_path / "elsewhere" / "join.key")
    cpu = data["templates"]["cpu"]
    cpu["bootstrap"] = {"mode": "first-boot"}
    cpu["providers"]["sim"]["image"] = "bake:newest"
    config.write_text(json.dumps(data))
    code, stdout, stderr = run("replay", str(trace), "--config", str(config), "--json")
    assert code == 0, stderr
    replayed = json.loads(stdout)["replayed"]
    assert replayed["launches"] >= 3 and replayed["returns"] == replayed["launches"]
    assert not (tmp_path / "elsewhere").exists()


def test_format_says_what_the_source_is(tmp_path: Path, trace: Path) -> None:
    named = tmp_path / "trace.txt"
    named.write_text(TRACE)
    code, stdout, _ = run("replay", str(named), "--format", "swf", "--config", str(site(tmp_path)), "--json")
    assert code == 0 and json.loads(stdout)["source"]["kind"] == "swf"
    code, _, stderr = run("replay", str(named), "--format", "recording", "--config", str(site(tmp_path)))
    assert code == 2 and "line 1: not JSON" in stderr and len(stderr.strip().splitlines()) == 1


def test_a_candidate_that_does_not_validate_exits_3(tmp_path: Path, trace: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: x\nproviders: {nope: 1}\n")
    code, _, stderr = run("replay", str(trace), "--config", str(bad))
    assert code == 3 and "providers.nope" in stderr and "Traceback" not in stderr
