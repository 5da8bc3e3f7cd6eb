"""The simulated cloud's own maximum lifetime: ``xce:max_lifetime`` ends an instance, reason ``expired``.

Time is an explicit clock handed to the store: no test sleeps or measures time.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tf.iface import CreateContext, ReadContext, ReadDataContext
from tf.utils import Diagnostics

from orchestrator.model.tags import MAX_LIFETIME
from orchestrator.sim.cloud import service
from orchestrator.sim.cloud.provider import InstanceResource, InstancesDataSource, XceSimProvider
from orchestrator.sim.cloud.store import (
    REASON_EXPIRED,
    CloudStore,
    Instance,
    InstanceNotFound,
    InsufficientCapacity,
    InvalidParameterValue,
)
from orchestrator.sim.hosts.manager import CloudStoreSource

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()
HOUR = 3600


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> CloudStore:
    return CloudStore(tmp_path / "cloud.sqlite", clock=clock)


def _make(store: CloudStore, token: str, lifetime: str | None, flavor: str = "c8.large") -> Instance:
    tags = {"xce:cluster": "demo", "xce:op_id": "op-1"}
    if lifetime is not None:
        tags[MAX_LIFETIME] = lifetime
    return store.create_instance(f"host-{token}", flavor, "debian-12", tags, "", token)


def _state(store: CloudStore, instance_id: str) -> tuple[str, str]:
    inst = store.get(instance_id)
    assert inst is not None
    return inst.state, inst.state_reason


def test_past_its_lifetime_the_cloud_terminates_it_with_reason_expired(store: CloudStore, clock: Clock) -> None:
    short = _make(store, "a", str(HOUR))
    long = _make(store, "b", str(24 * HOUR))
    untagged = _make(store, "c", None)
    assert short.launch_time == "2026-03-01T12:00:00Z"
    assert short.expires_at == "2026-03-01T13:00:00Z" and untagged.expires_at == ""

    clock.now = T0 + HOUR - 1
    assert [i.id for i in store.list_instances()] == [short.id, long.id, untagged.id]

    clock.now = T0 + 2 * HOUR
    assert [i.id for i in store.list_instances()] == [long.id, untagged.id]
    gone = store.get(short.id)
    assert gone is not None and gone.state == "terminated" and gone.state_reason == REASON_EXPIRED
    # Ended at its expiry, not when somebody happened to look.
    assert gone.terminated_at == "2026-03-01T13:00:00Z"
    assert _state(store, long.id) == ("running", "")

    # Without the tag an instance never expires, however old.
    clock.now = T0 + 100 * 365 * 24 * HOUR
    assert [i.id for i in store.list_instances()] == [untagged.id]
    assert _state(store, long.id) == ("terminated", REASON_EXPIRED)


def test_every_operation_sees_the_expiry(store: CloudStore, clock: Clock) -> None:
    inst = _make(store, "a", "60")
    clock.now = T0 + 61
    # A get (what the provider's refresh does) is enough; no separate sweeper has to run.
    assert _state(store, inst.id) == ("terminated", REASON_EXPIRED)
    assert store.delete(inst.id) is False  # the cloud ended it, not this delete
    assert _state(store, inst.id) == ("terminated", REASON_EXPIRED)

    other = _make(store, "b", "60")
    clock.now += 61
    version, changed = store.changes_since(0)
    assert [(i.id, i.state) for i in changed][-1] == (other.id, "terminated")
    assert version == changed[-1].version
    with pytest.raises(InstanceNotFound, match="no live instance"):
        store.update_tags(other.id, {"a": "b"})


def test_expire_due_reports_each_expiry_once(store: CloudStore, clock: Clock) -> None:
    a = _make(store, "a", "100")
    b = _make(store, "b", "50")
    _make(store, "c", "1000")
    assert store.expire_due() == []
    clock.now = T0 + 200
    swept = store.expire_due()
    assert [i.id for i in swept] == [b.id, a.id]  # earliest expiry first
    assert all(i.state == "terminated" and i.state_reason == REASON_EXPIRED for i in swept)
    assert store.expire_due() == []


def test_expiry_frees_capacity_address_and_client_token(store: CloudStore, clock: Clock) -> None:
    store.set_capacity("g4.xlarge", 1)
    first = _make(store, "op-9-0", "60", flavor="g4.xlarge")
    with pytest.raises(InsufficientCapacity):
        _make(store, "op-9-1", None, flavor="g4.xlarge")
    clock.now = T0 + 61
    again = _make(store, "op-9-0", None, flavor="g4.xlarge")
    # The token of an expired instance is free: a new create is a new instance on the freed address.
    assert again.id != first.id and again.address == first.address


def test_a_stopped_instance_expires_too(store: CloudStore, clock: Clock) -> None:
    inst = _make(store, "a", "60")
    store.stop(inst.id)
    clock.now = T0 + 60
    assert _state(store, inst.id) == ("terminated", REASON_EXPIRED)


def test_a_tag_update_moves_the_expiry_from_the_launch_time(store: CloudStore, clock: Clock) -> None:
    inst = _make(store, "a", "60")
    clock.now = T0 + 30
    longer = store.update_tags(inst.id, {**inst.tags, MAX_LIFETIME: "600"})
    assert longer.expires_at == "2026-03-01T12:10:00Z"
    clock.now = T0 + 300
    assert _state(store, inst.id) == ("running", "")
    store.update_tags(inst.id, {"xce:cluster": "demo"})  # tag removed: never expires
    clock.now = T0 + 10_000
    assert _state(store, inst.id) == ("running", "")
    store.update_tags(inst.id, {MAX_LIFETIME: "120"})  # already past: ended at once
    assert _state(store, inst.id) == ("terminated", REASON_EXPIRED)


@pytest.mark.parametrize("value", ["", "0", "-60", "1.5", "7d", " 60", "060", "12345678901"])
def test_a_malformed_lifetime_is_refused_and_nothing_is_written(store: CloudStore, value: str) -> None:
    with pytest.raises(InvalidParameterValue, match=f"xce:max_lifetime {value!r}"):
        _make(store, "a", value)
    assert store.list_instances(include_terminated=True) == []
    inst = _make(store, "b", "60")
    with pytest.raises(InvalidParameterValue):
        store.update_tags(inst.id, {MAX_LIFETIME: value})
    assert store.get(inst.id) == inst


def test_the_expiry_is_durable_and_seen_by_another_store_object(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "cloud.sqlite"
    inst = _make(CloudStore(path, clock=clock), "a", "60")
    # Another process (a provider, the host manager) opening the store later sees it expired.
    later = CloudStore(path, clock=Clock(T0 + 61))
    assert [i.id for i in later.list_instances()] == []
    assert CloudStore(path, clock=clock).get(inst.id) == later.get(inst.id)


def test_a_version_2_store_gets_expiries_for_its_tagged_instances(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "cloud.sqlite"
    old = CloudStore(path, clock=clock)
    tagged = _make(old, "a", "60")
    untagged = _make(old, "b", None)
    old.close()
    with sqlite3.connect(path) as conn:  # what a store made before schema 3 looks like
        conn.execute("DROP INDEX instances_live_expiry")
        conn.execute("ALTER TABLE instances DROP COLUMN expires_at")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    reopened = CloudStore(path, clock=Clock(T0 + 61))
    assert [i.id for i in reopened.list_instances()] == [untagged.id]
    assert _state(reopened, tagged.id) == ("terminated", REASON_EXPIRED)


def test_the_host_manager_stops_seeing_an_expired_instance(tmp_path: Path) -> None:
    # The host manager reads with the real clock; an instance launched long ago with a short
    # lifetime is past its expiry now, so its host goes the way of any terminated instance's.
    path = tmp_path / "cloud.sqlite"
    store = CloudStore(path)
    tags = {"xce:cluster": "demo", MAX_LIFETIME: "3600"}
    old = store.create_out_of_band("old", "c8.large", "debian-12", tags, launch_time="2020-01-01T00:00:00Z")
    young = store.create_out_of_band("young", "c8.large", "debian-12", tags)
    views = CloudStoreSource(path).instances()
    assert views is not None and [v.id for v in views] == [young.id]
    gone = store.get(old.id)
    assert gone is not None and gone.state_reason == REASON_EXPIRED


def _provider(path: Path) -> XceSimProvider:
    p = XceSimProvider()
    diags = Diagnostics()
    p.configure_provider(diags, {"store": str(path), "max_retries": None})
    assert not diags.has_errors()
    return p


def test_the_provider_reports_an_expired_instance_gone(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    tags = {"xce:cluster": "demo", MAX_LIFETIME: "60"}
    expired = CloudStore(path).create_out_of_band(
        "old", "c8.large", "debian-12", tags, launch_time="2020-01-01T00:00:00Z"
    )
    provider = _provider(path)
    diags = Diagnostics()
    state = {"id": expired.id, "name": "old", "tags": tags}
    # Gone for a refresh (drift "delete") and absent from the tagged listing.
    assert InstanceResource(provider).read(ReadContext(diags, "xcesim_instance"), state) is None
    listed = InstancesDataSource(provider).read(ReadDataContext(diags, "xcesim_instances"), {"tags": {}})
    assert listed["instances"] == []
    assert not diags.has_errors()


def test_the_provider_turns_a_malformed_lifetime_into_a_diagnostic(tmp_path: Path) -> None:
    provider = _provider(tmp_path / "cloud.sqlite")
    planned: dict[str, object] = {
        "name": "h1",
        "flavor": "c8.large",
        "image": "debian-12",
        "tags": {MAX_LIFETIME: "7d"},
        "user_data": "",
        "client_token": "op-1-0",
        "id": None,
        "address": None,
        "launch_time": None,
        "state": None,
    }
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "xcesim_instance"), planned) is None
    assert [d.summary for d in diags.diagnostics] == [
        "InvalidParameterValue: xce:max_lifetime '7d' is not a whole number of seconds (1 to 10 digits)"
    ]


def test_sim_cloud_list_shows_the_lifetime_and_the_expiry(store: CloudStore, clock: Clock) -> None:
    inst = _make(store, "a", "60")
    assert "lifetime=60" in service.owner_summary(inst)
    clock.now = T0 + 61
    table = service.format_table(service.list_instances(store, [], include_terminated=True))
    assert "terminated (expired)" in table.splitlines()[1]
    ended = store.get(inst.id)
    assert ended is not None and ended.to_json()["expires_at"] == "2026-03-01T12:01:00Z"


def test_the_listing_says_when_the_cloud_terminated_an_instance(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    tags = {"xce:cluster": "demo", MAX_LIFETIME: "60"}
    store = CloudStore(path)
    launched = time.time() - 120  # with a lifetime of 60 s: ended by the cloud a minute ago
    rfc = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    expired = store.create_out_of_band("old", "c8.large", "debian-12", tags, launch_time=rfc(launched))
    live = store.create_out_of_band("new", "c8.large", "debian-12", {"xce:cluster": "demo"})
    store.expire_due()
    diags = Diagnostics()
    config = {"tags": {}, "recently_terminated": True}
    listed = InstancesDataSource(_provider(path)).read(ReadDataContext(diags, "xcesim_instances"), config)
    by_id = {i["id"]: i for i in listed["instances"]}
    assert by_id[expired.id]["state"] == "terminated" and by_id[expired.id]["terminated_at"] == rfc(launched + 60)
    assert by_id[live.id]["terminated_at"] is None
