"""The simulated cloud's own billing records (``billing.py``) and ``xceprov sim cloud bill``.

Time is an explicit clock handed to the store: no test sleeps or measures time.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from orchestrator.model.durations import period_of
from orchestrator.sim.cloud import billing
from orchestrator.sim.cloud.billing_service import bill
from orchestrator.sim.cloud.store import CloudStore
from tests.sim_cloud_cli import run_cli as _run
from tests.unit.sim.cloud.test_sim_cloud_expiry import Clock

OWNER = {"xce:cluster": "demo", "xce:provider": "sim"}
T0 = 1_767_323_040.0  # a whole second, as the cloud's launch times are


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> CloudStore:
    return CloudStore(tmp_path / "cloud.sqlite", clock=clock)


def test_running_seconds_bill_at_the_catalogue_price_until_termination(store: CloudStore, clock: Clock) -> None:
    inst = store.create_instance("h", "c8.large", "debian-12", OWNER, "", "k-0")
    clock.now += 1800
    assert store.delete(inst.id)
    clock.now += 1800  # after termination nothing more is billed
    found = bill(store, 0, clock.now)
    (line,) = found.lines
    assert line.running_seconds == 1800 and line.cost == pytest.approx(0.34 / 2)
    assert line.provider == "sim" and line.cluster == "demo" and not line.unpriced
    assert found.total == pytest.approx(0.17)


def test_a_stopped_instance_bills_nothing_while_stopped(store: CloudStore, clock: Clock) -> None:
    inst = store.create_instance("h", "c4.large", "debian-12", OWNER, "", "k-0")
    clock.now += 600
    store.stop(inst.id)
    clock.now += 3000
    store.start(inst.id)
    clock.now += 600
    (line,) = bill(store, 0, clock.now).lines
    assert line.running_seconds == 1200 and line.stopped_seconds == 3000
    assert line.cost == pytest.approx(0.17 * 1200 / 3600)


def test_a_flavor_not_in_the_catalogue_bills_zero_and_is_named(store: CloudStore, clock: Clock) -> None:
    store.create_instance("h", "mystery", "debian-12", OWNER, "", "k-0")
    clock.now += 3600
    found = bill(store, 0, clock.now)
    assert found.total == 0 and found.unpriced_flavors == ["mystery"]
    assert found.to_json()["total"]["unpriced_flavors"] == ["mystery"]


def test_the_period_clips_every_segment(store: CloudStore, clock: Clock) -> None:
    store.create_instance("h", "c8.large", "debian-12", OWNER, "", "k-0")
    clock.now += 7200
    (line,) = bill(store, T0 + 1800, T0 + 3600).lines
    assert line.running_seconds == 1800 and line.cost == pytest.approx(0.17)
    assert bill(store, T0 + 7200, T0 + 7200).total == 0  # an empty period bills nothing
    assert billing.overlap(10, 20, 0, 5) == 0 and billing.overlap(10, 20, 15, 30) == 5


def test_a_spot_reclaim_ends_the_bill_at_the_reclaim(store: CloudStore, clock: Clock) -> None:
    inst = store.create_instance("h", "c8.large.spot", "debian-12", OWNER, "", "k-0", zone="a")
    clock.now += 100
    store.spot_notice(instance_id=inst.id, lead=120)
    clock.now += 500  # the reclaim was due at T0 + 220
    (line,) = bill(store, 0, clock.now).lines
    assert line.running_seconds == 220


def test_an_older_store_is_backfilled_once_from_launch_and_termination(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "cloud.sqlite"
    store = CloudStore(path, clock=clock)
    inst = store.create_instance("h", "c8.large", "debian-12", OWNER, "", "k-0")
    clock.now += 3600
    store.delete(inst.id)
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE billing")  # as a store made before billing existed
    conn.execute("DELETE FROM meta WHERE key = 'billing_backfilled'")
    conn.commit()
    conn.close()
    again = CloudStore(path, clock=clock)
    (line,) = bill(again, 0, clock.now).lines
    assert line.running_seconds == 3600 and line.cost == pytest.approx(0.34)


def test_sim_cloud_bill_prints_lines_and_totals(config: Path) -> None:
    store = CloudStore(config.parent / "sim" / "cloud.sqlite", clock=lambda: T0)
    store.create_instance("h", "c8.large", "debian-12", OWNER, "", "k-0")
    store.create_instance("u", "mystery", "debian-12", OWNER, "", "k-1")
    code, out, _ = _run(config, "sim", "cloud", "bill", "--json", "--since", str(T0), "--until", str(T0 + 3600))
    assert code == 0
    doc = json.loads(out)
    assert doc["total"]["cost"] == pytest.approx(0.34) and doc["total"]["instances"] == 2
    assert doc["total"]["unpriced_flavors"] == ["mystery"]
    code, out, _ = _run(config, "sim", "cloud", "bill", "--since", str(T0), "--until", str(T0 + 3600))
    assert code == 0 and "total 0.340000 over 2 instance(s)" in out and "mystery" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--since", "yesterday"), "bad --since 'yesterday'"), (("--since", "1h", "--until", "2h"), "before --since")],
)
def test_sim_cloud_bill_bad_period_is_one_line(config: Path, args: tuple[str, ...], message: str) -> None:
    code, _, err = _run(config, "sim", "cloud", "bill", *args)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1


def test_period_defaults_to_the_beginning_until_now() -> None:
    assert period_of(None, None, now=100.0) == (0.0, 100.0)
    assert period_of("30s", None, now=100.0) == (70.0, 100.0)
