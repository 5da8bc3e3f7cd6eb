"""``reportReasons``: the simulated controller keeps the latest reason per template and shows it.

A report is answered ``ok`` and replaces what its sender reported before (a template it no
longer names is gone); another provisioner's templates stay; the status reply carries them
(``ControllerStatus.reasons``); a worker may not send one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_controller_helpers import ProtoClient, Running, join_provisioner, join_worker, running_controller


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl") as rc:
        yield rc


def report(c: ProtoClient, *reasons: tuple[str, str, int]) -> str:
    def fill(env: Any) -> None:
        r = env.init("reportReasons")
        r.timeUnixMs = 1
        items = r.init("reasons", len(reasons))
        for i, (template, code, until_ms) in enumerate(reasons):
            items[i].template, items[i].code, items[i].untilUnixMs = template, code, until_ms
            items[i].provider, items[i].detail = "sim", f"{code} on sim"

    return c.request(fill).kind


def shown(c: ProtoClient) -> list[tuple[str, str, int]]:
    body = c.request(lambda env: setattr(env, "queryStatus", None)).body
    return [(r["template"], r["code"], r["untilUnixMs"]) for r in body.get("reasons", [])]


def test_each_report_replaces_its_senders_and_the_status_shows_the_latest(
    ctl: Running, clients: list[ProtoClient]
) -> None:
    a, b = ctl.provisioner("orch-a"), ctl.provisioner("orch-b")
    clients += [a, b]
    assert join_provisioner(a, "a", ["sim"]).kind == "joined"
    assert join_provisioner(b, "b", ["aws"]).kind == "joined"
    assert report(a, ("cpu", "quota", 1_800_000_000_000), ("gpu", "cooldown", 0)) == "ok"
    assert report(b, ("big", "no-lease", 0)) == "ok"
    assert shown(a) == [("big", "no-lease", 0), ("cpu", "quota", 1_800_000_000_000), ("gpu", "cooldown", 0)]
    assert report(a, ("cpu", "launched", 0)) == "ok"  # gpu's demand is met: a no longer names it
    assert shown(b) == [("big", "no-lease", 0), ("cpu", "launched", 0)]


def test_a_worker_may_not_report_reasons(ctl: Running, clients: list[ProtoClient]) -> None:
    w = ctl.anonymous()
    clients.append(w)
    assert join_worker(w, "h1", token=ctl.token("", "h1")).kind == "joined"
    reply = w.request(lambda env: env.init("reportReasons"))
    assert reply.kind == "error" and reply.body["code"] == "permissionDenied"
