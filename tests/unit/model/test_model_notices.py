"""Interruption notices are untrusted input: ids, times and sizes checked, bad ones refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.model.config import Config
from orchestrator.model.modules import MODULES
from orchestrator.model.notices import MAX_DETAIL, MAX_LEAD, MAX_NOTICES, InterruptionNotice, checked
from orchestrator.ops.notices import NoticeReader

NOW = 1_800_000_000.0


def test_a_good_notice_is_taken_as_it_is() -> None:
    got = checked("sim", {"instance_id": "i-0abc", "noticed_at": NOW - 3, "reclaim_at": NOW + 117}, NOW)
    assert isinstance(got, InterruptionNotice)
    assert (got.instance_id, got.noticed_at, got.reclaim_at, got.kind, got.clamped) == (
        "i-0abc",
        NOW - 3,
        NOW + 117,
        "spot-interruption",
        (),
    )


def test_rfc3339_times_are_read() -> None:
    got = checked("sim", {"instance_id": "i-1", "reclaim_at": "2027-01-15T08:02:00Z"}, NOW)
    assert isinstance(got, InterruptionNotice) and got.reclaim_at == NOW + 120 and got.noticed_at == NOW


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("i-1", "a notice must be a mapping"),
        ({"reclaim_at": NOW}, "bad instance id"),
        ({"instance_id": "i-1\nERROR forged", "reclaim_at": NOW}, "bad instance id"),
        ({"instance_id": "x" * 200, "reclaim_at": NOW}, "bad instance id"),
        ({"instance_id": "../etc", "reclaim_at": NOW}, "bad instance id"),
        ({"instance_id": "i-1", "reclaim_at": "soon"}, "bad reclaim time"),
        ({"instance_id": "i-1", "reclaim_at": float("nan")}, "bad reclaim time"),
        ({"instance_id": "i-1", "reclaim_at": True}, "bad reclaim time"),
        ({"instance_id": "i-1"}, "bad reclaim time"),
    ],
)
def test_a_bad_notice_is_refused_in_one_line(raw: object, why: str) -> None:
    got = checked("sim", raw, NOW)
    assert isinstance(got, str) and why in got and "\n" not in got


def test_times_past_or_absurdly_far_are_clamped_and_said() -> None:
    past = checked("sim", {"instance_id": "i-1", "reclaim_at": NOW - 600}, NOW)
    assert isinstance(past, InterruptionNotice) and past.reclaim_at == NOW and past.clamped
    far = checked("sim", {"instance_id": "i-1", "reclaim_at": NOW + 86400 * 30}, NOW)
    assert isinstance(far, InterruptionNotice) and far.reclaim_at == NOW + MAX_LEAD and far.clamped
    future = checked("sim", {"instance_id": "i-1", "noticed_at": NOW + 50, "reclaim_at": NOW + 100}, NOW)
    assert isinstance(future, InterruptionNotice) and future.noticed_at == NOW and future.clamped


def test_kind_and_detail_are_printable_and_bounded() -> None:
    got = checked("sim", {"instance_id": "i-1", "reclaim_at": NOW, "kind": "x\x1b[2J", "detail": "d" * 9999}, NOW)
    assert isinstance(got, InterruptionNotice)
    assert got.kind.isprintable() and len(got.detail) == MAX_DETAIL


def _config(tmp_path: Path) -> Config:
    text = (
        "cluster: c\ncontroller: {ca: system}\n"
        f"state_dir: {tmp_path}/state\n"
        "providers:\n  sim: {module: xcesim}\n  ec2: {module: aws, settings: {region: eu-west-1}}\n"
        "templates:\n  cpu:\n    providers:\n      sim: {image: deb, flavor: c8}\n"
    )
    return parse_config(text, "site.yaml", tmp_path).config


def test_the_reader_reads_only_modules_with_a_reader_and_bounds_a_read(tmp_path: Path) -> None:
    config = _config(tmp_path)
    raw = [{"instance_id": f"i-{n}", "reclaim_at": NOW + 60} for n in range(MAX_NOTICES + 5)]
    raw.insert(0, {"instance_id": "bad id", "reclaim_at": NOW})
    reader = NoticeReader(lambda: config, {"xcesim": lambda cfg, provider: raw}, clock=lambda: NOW)
    assert reader.reads("sim") and not reader.reads("ec2") and not reader.reads("nope")
    batch = reader("sim")
    assert len(batch.notices) == MAX_NOTICES and batch.refused[0].startswith("bad instance id")
    assert "the rest wait for the next" in batch.refused[-1]
    assert reader("ec2").notices == ()


def test_a_reader_that_fails_gives_no_notice_and_says_why(tmp_path: Path) -> None:
    config = _config(tmp_path)

    def broken(cfg: Config, provider: str) -> list[object]:
        raise OSError("the cloud API is down")

    batch = NoticeReader(lambda: config, {"xcesim": broken}, clock=lambda: NOW)("sim")
    assert batch.notices == () and "the cloud API is down" in batch.error


def test_the_registry_says_where_each_module_s_notices_come_from() -> None:
    assert MODULES["xcesim"].notices is not None and MODULES["xcesim"].notices.built_in
    aws = MODULES["aws"].notices
    assert aws is not None and not aws.built_in and "Spot Instance Interruption Warning" in aws.source
    assert MODULES["openstack"].notices is None
