"""Spot interruption notices of the simulated cloud: a notice, then the reclaim at its time.

Time is an explicit clock handed to the store: no test sleeps or measures time.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tf.iface import ReadDataContext
from tf.utils import Diagnostics

from orchestrator.sim.cloud.provider import InstancesDataSource, XceSimProvider
from orchestrator.sim.cloud.records import REASON_SPOT, rfc3339
from orchestrator.sim.cloud.store import CloudStore
from tests.sim_cloud_cli import run_cli as _run

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _store(path: Path, clock: Clock) -> CloudStore:
    return CloudStore(path / "cloud.sqlite", clock=clock)


def test_a_notice_reclaims_at_its_time_whoever_reads(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    a = store.create_instance("a", "spot.small", "deb", {"xce:provider": "sim"}, "", "k-0")
    b = store.create_instance("b", "spot.small", "deb", {"xce:provider": "sim"}, "", "k-1")
    [notice] = store.spot_notice(instance_id=a.id, lead=120)
    assert notice.reclaim_at == T0 + 120 and notice.pending
    clock.now = T0 + 119
    assert store.get(a.id).state == "running"  # type: ignore[union-attr]
    clock.now = T0 + 121
    # Any read reclaims what is due: a listing here, by another store object on the same file.
    other = _store(tmp_path, clock)
    live = {i.id for i in other.list_instances()}
    assert live == {b.id}
    gone = other.get(a.id)
    assert gone is not None and gone.state == "terminated" and gone.state_reason == REASON_SPOT
    assert gone.terminated_at == rfc3339(T0 + 120)  # the reclaim time, not when it was seen
    [after] = other.list_notices()
    assert after.reclaimed_at == T0 + 120 and not after.pending
    # Reclaimed once: the journal has one delete of it.
    deletes = [m for m in other.mutations() if m.action == "delete" and m.instance_id == a.id]
    assert len(deletes) == 1 and deletes[0].reason == REASON_SPOT


def test_a_second_notice_keeps_the_first_and_a_flavor_notices_every_running_one(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    a = store.create_instance("a", "spot.small", "deb", {}, "", "k-0")
    b = store.create_instance("b", "spot.small", "deb", {}, "", "k-1")
    c = store.create_instance("c", "c8", "deb", {}, "", "k-2")
    store.spot_notice(instance_id=a.id, lead=60)
    clock.now = T0 + 10
    noticed = store.spot_notice(flavor="spot.small", lead=300)
    assert {n.instance_id: n.reclaim_at for n in noticed} == {a.id: T0 + 60, b.id: T0 + 310}
    assert c.id not in {n.instance_id for n in store.list_notices()}


def test_a_noticed_instance_deleted_first_is_not_reclaimed_later(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    a = store.create_instance("a", "spot.small", "deb", {}, "", "k-0")
    store.spot_notice(instance_id=a.id, lead=60)
    clock.now = T0 + 5
    assert store.delete(a.id)
    clock.now = T0 + 100
    assert store.get(a.id).state_reason == "user-terminate"  # type: ignore[union-attr]
    assert store.list_notices()[0].reclaimed_at == T0 + 5


def test_the_instances_data_source_shows_the_notice(tmp_path: Path) -> None:
    clock = Clock(float(int(time.time())))  # the provider reads with the real clock
    store = _store(tmp_path, clock)
    a = store.create_instance("a", "spot.small", "deb", {"xce:cluster": "demo"}, "", "k-0")
    b = store.create_instance("b", "spot.small", "deb", {"xce:cluster": "demo"}, "", "k-1")
    store.spot_notice(instance_id=a.id, lead=120)
    p = XceSimProvider()
    diags = Diagnostics()
    p.configure_provider(diags, {"store": str(store.path), "max_retries": None})
    listed = InstancesDataSource(p).read(ReadDataContext(diags, "xcesim_instances"), {"tags": {}})
    assert listed is not None and not diags.has_errors()
    by_id = {i["id"]: i for i in listed["instances"]}
    assert by_id[a.id]["reclaim_at"] == rfc3339(clock.now + 120)
    assert by_id[a.id]["interruption_at"] == rfc3339(clock.now)
    assert by_id[b.id]["reclaim_at"] is None and by_id[b.id]["interruption_at"] is None


def test_the_cli_notices_and_shows_it(config: Path) -> None:
    store = CloudStore(config.parent / "sim" / "cloud.sqlite")
    a = store.create_instance("a", "spot.small", "deb", {}, "", "k-0")
    code, out, _ = _run(config, "sim", "fault", "spot-notice", a.id, "--lead", "10m")
    assert code == 0 and a.id in out and "reclaim at" in out
    [notice] = store.list_notices()
    assert notice.reclaim_at - notice.noticed_at == 600
    code, out, _ = _run(config, "sim", "cloud", "list")
    assert code == 0 and "(reclaim " in out
    code, out, _ = _run(config, "sim", "cloud", "list", "--json")
    assert [n["instance_id"] for n in json.loads(out)["notices"]] == [a.id]
    code, out, _ = _run(config, "sim", "fault", "show", "--json")
    assert json.loads(out)["notices"][0]["reclaimed_at"] == ""
    code, out, _ = _run(config, "sim", "fault", "show")
    assert code == 0 and "notices:" in out and a.id in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "exactly one of an instance ID or --flavor"),
        (("i-000000000000", "--flavor", "x"), "exactly one of"),
        (("i-000000000000",), "no instance i-000000000000"),
        (("--flavor", "spot.small", "--lead", "soon"), "bad --lead 'soon'"),
        (("--flavor", "spot.small", "--lead", "-5"), "bad --lead '-5'"),
    ],
)
def test_the_cli_refuses_bad_input_in_one_line(config: Path, args: tuple[str, ...], needle: str) -> None:
    CloudStore(config.parent / "sim" / "cloud.sqlite")
    code, _, err = _run(config, "sim", "fault", "spot-notice", *args)
    assert code != 0 and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_cli_refuses_a_terminated_instance(config: Path) -> None:
    store = CloudStore(config.parent / "sim" / "cloud.sqlite")
    a = store.create_instance("a", "spot.small", "deb", {}, "", "k-0")
    store.delete(a.id)
    code, _, err = _run(config, "sim", "fault", "spot-notice", a.id)
    assert code != 0 and f"instance {a.id} is terminated, not running" in err
