"""The capacity benchmark's pure parts: the request journal grouped into create attempts per
offering, the attempts per probe interval, the verdicts, and ``--check`` (synthetic data)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import bench_capacity
from bench.bench_capacity import main, parse
from bench.capacity_journal import (
    Request,
    attempts,
    audit_counts,
    burst_row,
    markdown,
    per_interval,
    probe_floor,
    probe_gaps,
    probing,
    requests_of,
    unix_time,
    verdicts,
)

OP_A, OP_B = "op-6b13fbb5-5432bff6e474", "op-6b13fbb7-3ad657bdddc9"


def asked(at: float, key: str, outcome: str = "capacity", offering: str = "c4.large@z1") -> Request:
    return Request(at, offering, key, outcome)


def test_journal_rows_name_their_offering_and_deletes_are_left_out() -> None:
    def row(at: Any, action: str, outcome: str, **more: Any) -> dict[str, Any]:
        return {"at": at, "action": action, "outcome": outcome, "flavor": "c4.large", "zone": "", **more}

    doc = {
        "requests": [
            row(1700000010.5, "create", "created", offering="c8.large@z2", client_token=f"{OP_A}-001"),
            row(1700000005.0, "delete", "deleted", client_token=f"{OP_A}-002"),
            row(1700000000.0, "create", "quota", client_token=f"{OP_A}-000"),
        ]
    }
    assert requests_of(doc) == [
        Request(1700000000.0, "c4.large", f"{OP_A}-000", "quota"),
        Request(1700000010.5, "c8.large@z2", f"{OP_A}-001", "created"),
    ]
    assert unix_time("2023-11-14T22:13:20Z") == 1700000000.0


def test_one_apply_is_one_attempt_and_a_key_asked_again_is_another() -> None:
    rows = [asked(100.0 + i / 100, f"{OP_A}-{i:03d}") for i in range(10)]  # one apply of 10
    rows.append(asked(100.5, f"{OP_A}-003"))  # the same op applied again at once: counted
    rows.append(asked(100.6, f"{OP_B}-000"))  # another op on the offering: counted
    rows.append(asked(103.0, f"{OP_B}-001"))  # the same op, later than one apply's spread
    rows.append(asked(100.2, f"{OP_A}-000", "created", offering="c8.large@z2"))
    found = attempts(rows)
    assert [(a.op, a.requests) for a in found["c4.large@z1"]] == [(OP_A, 10), (OP_A, 1), (OP_B, 1), (OP_B, 1)]
    assert [(a.requests, a.refused) for a in found["c8.large@z2"]] == [(1, False)]


def test_attempts_within_a_probe_interval_of_a_refusal_are_counted() -> None:
    floor = probe_floor(30.0, 0.5)
    assert floor == 15.0
    spaced = attempts([asked(0.0, f"{OP_A}-000"), asked(20.0, f"{OP_B}-000"), asked(60.0, f"{OP_B}-000")])
    tried = spaced["c4.large@z1"]
    assert probe_gaps(tried) == [20.0, 40.0]
    assert per_interval(tried, floor) == 1
    # Three attempts inside one interval after the refusal: three per interval.
    looping = attempts([asked(0.0, f"{OP_A}-000"), asked(5.0, f"{OP_A}-000"), asked(10.0, f"{OP_A}-000")])
    assert per_interval(looping["c4.large@z1"], floor) == 3
    # Creates that succeeded put nothing in backoff: the next attempt may come at once.
    fine = attempts([asked(0.0, f"{OP_A}-000", "created"), asked(3.0, f"{OP_B}-000", "created")])
    assert per_interval(fine["c4.large@z1"], floor) == 1 and probe_gaps(fine["c4.large@z1"]) == []
    assert per_interval([], floor) == 0


def test_probing_reports_every_offering_even_untried() -> None:
    rows = [asked(0.0, f"{OP_A}-000"), asked(0.1, f"{OP_A}-001", "quota"), asked(40.0, f"{OP_B}-000")]
    found = probing(rows, ["c4.large@z1", "c8.large@z1"], 15.0)
    assert found["c4.large@z1"] == {
        "offering": "c4.large@z1",
        "attempts": 2,
        "refused_attempts": 2,
        "requests": 3,
        "outcomes": {"capacity": 2, "quota": 1},
        "gaps_after_refusal_s": [39.9],
        "min_gap_s": 39.9,
        "per_interval": 1,
    }
    assert found["c8.large@z1"]["attempts"] == 0 and found["c8.large@z1"]["per_interval"] == 0


def offering(name: str, refused: int, most: int) -> dict[str, Any]:
    return {
        "offering": name,
        "attempts": refused,
        "refused_attempts": refused,
        "requests": 10 * refused,
        "gaps_after_refusal_s": [20.0] * max(0, refused - 1),
        "per_interval": most,
    }


def results(refusing_s: float = 3.0, most: int = 1, created: int = 0, quota_reasons: int = 1) -> dict[str, Any]:
    return {
        "baseline": {"burst": {"hosts": 20, "to_all_running_s": 2.0}},
        "refusing": {
            "burst": {"hosts": 20, "to_all_running_s": refusing_s},
            "refusing": ["c4.large@z1", "c8.large@z1"],
            "probe_floor_s": 15.0,
            "offerings": {
                "c4.large@z1": offering("c4.large@z1", 3, most),
                "c8.large@z1": offering("c8.large@z1", 3, 1),
                "c4.large@z2": offering("c4.large@z2", 0, 1),
            },
            "deleted": 0,
        },
        "quota": {
            "seconds": 600.0,
            "outcomes": {"quota": 2},
            "created": created,
            "deleted": 0,
            "status_quota_reasons": quota_reasons,
            "controller_quota_reasons": 1,
        },
    }


def test_each_target_is_judged() -> None:
    found = verdicts(results())
    assert all(met for _, met in found)
    lines = [line for line, _ in found]
    assert lines[0] == "time to 20 instances running, half of the offerings refusing / none refusing: 1.5 <= 2"
    assert lines[1].startswith("c4.large@z1: create attempts per probe interval (15 s): 1 <= 1 (3 attempts")
    assert not any(line.startswith("c4.large@z2") for line in lines)  # never refused: nothing to judge
    assert "600 s of quota refusals: quota reasons in status --json 1 == 1" in lines
    missed = [line for line, met in verdicts(results(5.0, most=2, created=1, quota_reasons=2)) if not met]
    assert missed[0].endswith("2.5 <= 2")
    assert missed[1].startswith("c4.large@z1: create attempts per probe interval (15 s): 2 <= 1")
    assert "600 s of quota refusals: instances created 1 == 0" in missed
    assert "600 s of quota refusals: quota reasons in status --json 2 == 1" in missed


def test_a_refusing_offering_the_journal_never_saw_refused_is_a_miss() -> None:
    measured = results()
    measured["refusing"]["offerings"]["c8.large@z1"] = offering("c8.large@z1", 0, 0)
    missed = [line for line, met in verdicts(measured) if not met]
    assert missed == ["c8.large@z1: refused in the journal: 0 refused attempts >= 1 (the fault did not bite)"]
    assert verdicts({}) == []


def test_a_quota_window_without_a_quota_refusal_is_a_miss() -> None:
    measured = results()
    measured["quota"]["outcomes"] = {}  # nothing asked of the cloud: nothing created, nothing proven
    missed = [line for line, met in verdicts(measured) if not met]
    assert missed == ["600 s of quota refusals: creates refused for quota in the journal 0 >= 1 (the fault bit)"]


def test_check_fails_on_a_miss_and_the_summary_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_capacity, "run", lambda _args: results(refusing_s=5.0))
    out = tmp_path / "r.json"
    assert main(["--out", str(out)]) == 0
    assert main(["--out", str(out), "--check"]) == 1
    assert json.loads(out.read_text())["refusing"]["burst"]["to_all_running_s"] == 5.0
    printed = capsys.readouterr().out
    assert "MISS: time to 20 instances running, half of the offerings refusing / none refusing: 2.5 <= 2" in printed
    assert "PASS: instances deleted while refused: 0 == 0" in printed


def test_quick_shortens_the_windows_and_bad_parts_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    quick = parse(["--quick"])
    assert (quick.quota_seconds, quick.capacity_base, quick.only) == (60.0, 10.0, ["burst", "quota"])
    assert parse([]).quota_seconds == 600.0
    with pytest.raises(SystemExit) as exc:
        parse(["--only", "burst,spot"])
    assert exc.value.code == 2
    assert "--only: unknown part spot (of burst, quota)" in capsys.readouterr().err


def test_quick_keeps_what_is_given() -> None:
    assert parse(["--quick", "--probe-seconds", "30"]).probe_seconds == 30.0
    assert parse(["--capacity-base", "20"]).capacity_base == 20.0


def test_a_burst_row_says_how_many_ops_it_took() -> None:
    audit = [
        {"time": "2023-11-14T22:13:19Z", "action": "fact-requestIntent"},  # before the burst
        {"time": "2023-11-14T22:13:20Z", "action": "fact-requestIntent"},
        {"time": "2023-11-14T22:13:21Z", "action": "op-apply-failed"},
        {"time": "2023-11-14T22:13:22Z", "action": "op-returned"},
        {"time": "2023-11-14T22:13:23Z", "action": "fact-requestIntent"},
        {"time": "2023-11-14T22:13:30Z", "action": "fact-requestIntent"},  # after it
    ]
    counts = audit_counts(audit, 1700000000.4, 1700000002.6)  # widened to whole seconds: 20..23
    row = burst_row("refusing", 20, 2.2, {"c4.large@z2": 20}, counts)
    assert (row["ops"], row["refused_ops"], row["returned_ops"]) == (2, 1, 1)
    assert row["to_all_running_s"] == 2.2 and row["placed"] == {"c4.large@z2": 20}


@pytest.mark.parametrize("layout", ["offerings", "providers"])
def test_the_bench_site_is_one_the_toolkit_accepts(tmp_path: Path, layout: str) -> None:
    import yaml
    from sim_world_helpers import _site_config

    from orchestrator.configfile import load_config

    class World:
        site = tmp_path

    (tmp_path / "xceprov.yaml").write_text(yaml.safe_dump(_site_config(tmp_path, "bench", 7441, None)))
    bench_capacity.configure(World(), layout, 30.0, 120)
    config = load_config(str(tmp_path / "xceprov.yaml")).config
    # The cheapest first, the two refusing ones (z1) before the others, whatever the layout.
    offered = [
        (o.flavor, o.zone)
        for side in config.templates["cpu"].providers.values()
        for o in side.listed_offerings(config.templates["cpu"].xce.slots)
    ]
    names = [offer.name for offer in bench_capacity.offers(layout)]
    assert [bench_capacity.offering_name(f, z, None) for f, z in offered] == names
    assert config.templates["cpu"].bootstrap.mode == "first-boot"
    # The probe interval the verdicts count with is the one the daemon is given.
    assert (config.policy.capacity_backoff.base, config.policy.capacity_backoff.max) == (30.0, 120.0)
    assert config.policy.quota_backoff.base == 600.0


def test_quota_reasons_are_counted_per_template_in_either_shape() -> None:
    status = {"cpu": [{"code": "quota"}, {"code": "backoff"}], "gpu": [{"code": "quota"}]}
    controller = [{"template": "cpu", "code": "quota"}, {"template": "gpu", "code": "quota"}]
    assert bench_capacity.quota_reasons(status, "cpu") == 1
    assert bench_capacity.quota_reasons(controller, "cpu") == 1
    assert bench_capacity.quota_reasons(None, "cpu") == 0 and bench_capacity.quota_reasons({}, "cpu") == 0


def test_the_tables_of_the_performance_page() -> None:
    measured = results()
    measured["baseline"]["burst"].update({"placed": {"c4.large@z1": 20}, "ops": 1, "refused_ops": 0})
    measured["baseline"]["rounds_s"] = [2.0, 2.5]
    measured["refusing"]["burst"].update({"placed": {"c4.large@z2": 20}, "ops": 3, "refused_ops": 2})
    measured["refusing"]["offerings"]["c4.large@z1"]["outcomes"] = {"capacity": 30}
    for name in ("c8.large@z1", "c4.large@z2"):
        measured["refusing"]["offerings"][name]["outcomes"] = {}
    measured["quota"].update({"live": 5, "hosts": 10, "attempts": 1})
    table = markdown(measured).splitlines()
    assert "| baseline 20 | 2 s | 2, 2.5 | 1 | 0 |  | c4.large@z1 20 |" in table
    assert "| c4.large@z1 | 3 (3) | 30 capacity | 20, 20 | 1 |" in table
    assert "| 600 s | 5 | 10 | 1 | 2 quota | 0 | 0 | 1, 1 |" in table
