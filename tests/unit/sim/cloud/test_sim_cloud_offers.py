"""The simulated cloud's side of offerings (issue 31): zones and subnets, capacity per flavor and
zone, the account's quota, and the request journal that counts every create attempt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tf.iface import CreateContext, ReadDataContext
from tf.utils import Diagnostics

from orchestrator.sim.cloud import requestlog
from orchestrator.sim.cloud.provider import InstanceResource, InstancesDataSource, XceSimProvider
from orchestrator.sim.cloud.requestlog import create_attempts
from orchestrator.sim.cloud.schema import SCHEMA_VERSION
from orchestrator.sim.cloud.store import (
    CloudApiError,
    CloudStore,
    IdempotentParameterMismatch,
    InstanceLimitExceeded,
    InsufficientCapacity,
)

OWNER = {"xce:cluster": "demo", "xce:provider": "sim"}


@pytest.fixture
def now() -> list[float]:
    """The cloud's Unix time, moved by hand (``now[0] += ...``)."""
    return [1_800_000_000.0]


@pytest.fixture
def store(tmp_path: Path, now: list[float]) -> CloudStore:
    return CloudStore(tmp_path / "cloud.sqlite", clock=lambda: now[0])


def _make(store: CloudStore, key: str, flavor: str = "c8", zone: str = "", subnet: str = "", **kw: str):  # type: ignore[no-untyped-def]
    return store.create_instance(f"h-{key}", flavor, "debian-12", OWNER, "", key, zone=zone, subnet=subnet, **kw)


def test_zone_and_subnet_are_stored_listed_and_part_of_the_token(store: CloudStore) -> None:
    inst = _make(store, "op-1-000", zone="b", subnet="s1")
    assert (inst.zone, inst.subnet) == ("b", "s1")
    [listed] = store.list_instances()
    assert (listed.zone, listed.subnet) == ("b", "s1") and listed.to_json()["zone"] == "b"
    assert _make(store, "op-1-000", zone="b", subnet="s1").id == inst.id
    # The same client token for another placement is another request: refused like EC2's.
    with pytest.raises(IdempotentParameterMismatch):
        _make(store, "op-1-000", zone="a", subnet="s1")
    assert _make(store, "op-1-001").zone == ""


def test_a_zone_limit_counts_that_zone_only_and_names_flavor_and_zone(store: CloudStore) -> None:
    store.set_capacity("c8", 1, zone="b")
    _make(store, "k-0", zone="b")
    with pytest.raises(InsufficientCapacity) as caught:
        _make(store, "k-1", zone="b")
    assert str(caught.value) == "InsufficientCapacity: flavor c8 in zone b has no capacity (limit 1)"
    # Zone a, no zone, another flavor in zone b: untouched by the limit.
    _make(store, "k-2", zone="a")
    _make(store, "k-3")
    _make(store, "k-4", flavor="c4", zone="b")
    # A terminated instance gives its zone's room back.
    store.delete(store.list_instances()[0].id)
    _make(store, "k-5", zone="b")
    assert store.faults().zone_capacity == {("c8", "b"): 1} and store.faults().capacity == {}


def test_a_flavor_limit_without_zone_counts_every_zone_together(store: CloudStore) -> None:
    store.set_capacity("c8", 2)
    _make(store, "k-0", zone="a")
    _make(store, "k-1", zone="b")
    with pytest.raises(InsufficientCapacity) as caught:
        _make(store, "k-2", zone="c")
    assert str(caught.value) == "InsufficientCapacity: flavor c8 in zone c has no capacity (limit 2, every zone)"
    with pytest.raises(InsufficientCapacity, match=r"^InsufficientCapacity: flavor c8 has no capacity \(limit 2\)$"):
        _make(store, "k-3")
    store.set_capacity("c8", None)
    _make(store, "k-4", zone="c")


def test_the_quota_counts_every_flavor_and_refuses_with_ec2s_code(store: CloudStore) -> None:
    store.set_quota(2)
    _make(store, "k-0", flavor="c8")
    stopped = _make(store, "k-1", flavor="g4", zone="b")
    store.stop(stopped.id)  # a stopped instance still counts
    with pytest.raises(InstanceLimitExceeded) as caught:
        _make(store, "k-2", flavor="c4")
    assert str(caught.value) == "InstanceLimitExceeded: the account may run at most 2 instances (2 live)"
    assert store.faults().quota == 2
    store.set_quota(None)
    _make(store, "k-2", flavor="c4")
    store.set_quota(3)
    store.clear_faults()
    assert store.faults().quota is None


def test_every_create_and_delete_request_is_journalled_with_its_outcome(store: CloudStore, now: list[float]) -> None:
    store.set_capacity("c8", 1, zone="b")
    first = _make(store, "op-1-000", zone="b", subnet="s1")
    now[0] += 10
    with pytest.raises(InsufficientCapacity):
        _make(store, "op-1-001", zone="b", subnet="s1")
    _make(store, "op-1-000", zone="b", subnet="s1")  # a retry: the live instance is returned
    store.set_quota(1)
    with pytest.raises(InstanceLimitExceeded):
        _make(store, "op-1-002", flavor="c4")
    store.delete(first.id, epoch="3.1")
    store.delete(first.id)
    rows = [(r.action, r.outcome, r.offering, r.client_token, r.instance_id) for r in store.requests()]
    assert rows == [
        ("create", "created", "c8@b@s1", "op-1-000", first.id),
        ("create", "capacity", "c8@b@s1", "op-1-001", ""),
        ("create", "existing", "c8@b@s1", "op-1-000", first.id),
        ("create", "quota", "c4", "op-1-002", ""),
        ("delete", "deleted", "c8@b@s1", "op-1-000", first.id),
        ("delete", "absent", "c8@b@s1", "op-1-000", first.id),
    ]
    refused = store.requests()[1]
    assert refused.detail == "InsufficientCapacity: flavor c8 in zone b has no capacity (limit 1)"
    assert (refused.provider, refused.cluster, refused.at) == ("sim", "demo", now[0])
    assert store.requests()[4].epoch == "3.1"
    # From a Unix time on, and counted per offering (refused attempts included).
    assert [r.outcome for r in store.requests(since=now[0])][:2] == ["capacity", "existing"]
    assert create_attempts(store.requests()) == {"c8@b@s1": 3, "c4": 1}
    assert create_attempts(store.requests(), provider="other") == {}


def test_an_injected_api_error_is_a_request_with_outcome_error(store: CloudStore) -> None:
    api = CloudStore(store.path, api_faults=True, clock=store.clock)
    store.set_error_rate(1.0)
    with pytest.raises(CloudApiError):
        api.create_instance("h", "c8", "debian-12", OWNER, "", "op-9-000", zone="a")
    with pytest.raises(CloudApiError):
        api.delete("i-000000000000")
    assert [(r.action, r.outcome, r.offering) for r in store.requests()] == [
        ("create", "error", "c8@a"),
        ("delete", "error", ""),
    ]
    assert store.requests()[0].detail.startswith("InternalError: simulated API failure during create")


def test_a_lost_response_is_journalled_as_created(store: CloudStore) -> None:
    api = CloudStore(store.path, api_faults=True, clock=store.clock)
    store.set_lost_response(1.0)
    with pytest.raises(CloudApiError, match="RequestTimeout"):
        api.create_instance("h", "c8", "debian-12", OWNER, "", "op-9-000")
    assert [r.outcome for r in store.requests()] == ["created"]


def test_the_journal_keeps_the_newest_rows(store: CloudStore) -> None:
    with sqlite3.connect(store.path) as conn:
        for n in range(5):
            requestlog.append(
                conn,
                float(n),
                "create",
                "capacity",
                flavor="c8",
                zone="",
                subnet="",
                client_token=f"k-{n}",
                tags={},
                kept=3,
            )
    assert [r.client_token for r in store.requests()] == ["k-2", "k-3", "k-4"]


def test_a_schema_5_store_gains_zones_and_keeps_its_capacity_limits(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    old = CloudStore(path)
    live = _make(old, "op-1-000")
    old.close()
    with sqlite3.connect(path) as conn:
        # The version 5 shapes: no zone or subnet, capacity keyed by flavor alone, no zone counts.
        conn.execute("ALTER TABLE instances DROP COLUMN zone")
        conn.execute("ALTER TABLE instances DROP COLUMN subnet")
        conn.execute("DROP TABLE capacity")
        conn.execute("CREATE TABLE capacity (flavor TEXT PRIMARY KEY, max_live INTEGER NOT NULL)")
        conn.execute("INSERT INTO capacity VALUES ('c8', 2)")
        conn.execute("DROP TABLE zone_live")
        conn.execute("DROP TABLE requests")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema'")
    store = CloudStore(path)
    [inst] = store.list_instances()
    assert inst.id == live.id and (inst.zone, inst.subnet) == ("", "")
    assert store.faults().capacity == {"c8": 2}
    _make(store, "op-1-001", zone="b")
    with pytest.raises(InsufficientCapacity):
        _make(store, "op-1-002", zone="b")
    store.set_capacity("c8", 1, zone="b")
    assert store.faults().zone_capacity == {("c8", "b"): 1}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)
        assert conn.execute("SELECT live FROM zone_live WHERE flavor = 'c8' AND zone = ''").fetchone() == (1,)


def test_the_provider_places_an_instance_and_lists_its_zone_and_subnet(tmp_path: Path) -> None:
    provider = XceSimProvider()
    diags = Diagnostics()
    provider.configure_provider(diags, {"store": str(tmp_path / "cloud.sqlite"), "max_retries": None})
    planned = {
        "name": "h1",
        "flavor": "c8",
        "zone": "b",
        "subnet": "s1",
        "image": "debian-12",
        "tags": OWNER,
        "user_data": None,
        "client_token": "op-1-000",
        "power_state": None,
    }
    state = InstanceResource(provider).create(CreateContext(diags, "t"), planned)
    assert not diags.has_errors() and state is not None
    assert (state["zone"], state["subnet"]) == ("b", "s1")
    unplaced = InstanceResource(provider).create(
        CreateContext(diags, "t"), {**planned, "zone": None, "subnet": None, "client_token": "op-1-001"}
    )
    # Left out of the configuration: null in the state, no perpetual diff.
    assert unplaced is not None and (unplaced["zone"], unplaced["subnet"]) == (None, None)
    listed = InstancesDataSource(provider).read(ReadDataContext(diags, "d"), {"tags": None})
    assert listed is not None
    assert [(o["zone"], o["subnet"]) for o in listed["instances"]] == [("b", "s1"), ("", "")]


def test_the_tooling_create_is_a_request_and_the_clouds_own_terminations_are_not(store: CloudStore) -> None:
    stray = store.create_out_of_band("stray", "c8", "debian-12", {"xce:cluster": "demo"})
    spot = _make(store, "op-1-000", flavor="spot")
    store.delete_out_of_band(stray.id)
    store.spot_reclaim(instance_id=spot.id)
    assert [(r.action, r.outcome, r.instance_id) for r in store.requests()] == [
        ("create", "created", stray.id),
        ("create", "created", spot.id),
    ]
