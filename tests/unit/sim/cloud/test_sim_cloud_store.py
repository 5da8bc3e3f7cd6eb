"""The simulated cloud's SQLite store: idempotency, capacity, concurrency, tags, faults."""

from __future__ import annotations

import ipaddress
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import orchestrator
from orchestrator.errors import RetryableError
from orchestrator.sim.cloud import faults as faults_mod
from orchestrator.sim.cloud import store as store_mod
from orchestrator.sim.cloud.faults import seeded_draw
from orchestrator.sim.cloud.store import (
    AddressSpaceExhausted,
    CloudApiError,
    CloudStore,
    IdempotentParameterMismatch,
    InstanceNotFound,
    InsufficientCapacity,
)

HOSTILE = 'a"b ${var.x} %{ if true }x%{ endif }\nresource "x" "y" {}\t\\'


@pytest.fixture
def store(tmp_path: Path) -> CloudStore:
    return CloudStore(tmp_path / "cloud.sqlite")


def _make(store: CloudStore, token: str, flavor: str = "c8.large", **tags: str) -> store_mod.Instance:
    return store.create_instance(f"host-{token}", flavor, "debian-12", tags, "#cloud-config\n", token)


def test_create_reports_every_attribute(store: CloudStore) -> None:
    inst = store.create_instance("n1", "c8.large", "debian-12", {"xce:cluster": "demo"}, "ud", "op-1-0")
    assert inst.id.startswith("i-") and len(inst.id) == 14
    int(inst.id[2:], 16)
    assert inst.state == "running"
    assert inst.address == "10.213.0.2"  # .0.0 and .0.1 belong to the lab gateway
    assert inst.launch_time.endswith("Z") and "T" in inst.launch_time
    assert store.get(inst.id) == inst
    assert store.get("i-000000000000") is None


def test_same_client_token_returns_the_same_live_instance(store: CloudStore) -> None:
    first = _make(store, "op-7-0", team="a")
    again = _make(store, "op-7-0", team="b")
    assert again.id == first.id and again.address == first.address
    assert len(store.list_instances()) == 1


def test_client_token_reused_with_other_parameters_is_refused(store: CloudStore) -> None:
    _make(store, "op-7-0")
    with pytest.raises(IdempotentParameterMismatch, match="op-7-0"):
        store.create_instance("other", "c8.large", "debian-12", {}, "", "op-7-0")


def test_terminated_instance_releases_its_token(store: CloudStore) -> None:
    first = _make(store, "op-7-0")
    assert store.delete(first.id) is True
    assert store.delete(first.id) is False  # idempotent
    assert store.delete("i-ffffffffffff") is False
    second = _make(store, "op-7-0")
    assert second.id != first.id
    gone = store.get(first.id)
    assert gone is not None and gone.state == "terminated" and gone.terminated_at


def test_empty_token_is_never_deduplicated(store: CloudStore) -> None:
    a = store.create_instance("x", "f", "i", {}, "", "")
    b = store.create_instance("x", "f", "i", {}, "", "")
    assert a.id != b.id


def test_capacity_error_names_the_flavor(store: CloudStore) -> None:
    store.set_capacity("c8.large", 2)
    kept = [_make(store, "t1"), _make(store, "t2")]
    with pytest.raises(InsufficientCapacity) as err:
        _make(store, "t3")
    assert str(err.value) == "InsufficientCapacity: flavor c8.large has no capacity (limit 2)"
    _make(store, "other", flavor="g4.xlarge")  # other flavors are not limited
    store.delete(kept[0].id)
    _make(store, "t3")  # a termination frees capacity
    store.set_capacity("c8.large", None)
    _make(store, "t4")
    with pytest.raises(ValueError):
        store.set_capacity("c8.large", -1)


def test_spot_reclaim_and_stop_keep_the_capacity_count(store: CloudStore) -> None:
    store.set_capacity("spot.small", 2)
    a = _make(store, "a", flavor="spot.small")
    b = _make(store, "b", flavor="spot.small")
    store.stop(b.id)  # a stopped instance still holds its capacity
    with pytest.raises(InsufficientCapacity):
        _make(store, "c", flavor="spot.small")
    store.spot_reclaim(instance_id=a.id)
    _make(store, "c", flavor="spot.small")


def test_a_version_1_store_gets_its_flavor_counts(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    old = CloudStore(path)
    for i in range(3):
        _make(old, f"t{i}")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM flavor_live")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    reopened = CloudStore(path)
    reopened.set_capacity("c8.large", 3)
    with pytest.raises(InsufficientCapacity):
        _make(reopened, "t3")


def test_addresses_are_reused_only_after_termination(store: CloudStore) -> None:
    a, b, c = (_make(store, f"t{i}") for i in range(3))
    assert [a.address, b.address, c.address] == ["10.213.0.2", "10.213.0.3", "10.213.0.4"]
    store.delete(b.id)
    d = _make(store, "t3")
    assert d.address == b.address
    e = _make(store, "t4")
    assert e.address == "10.213.0.5"


def test_address_space_exhaustion_is_an_error(store: CloudStore) -> None:
    # The top /29 of 10.213.0.0/16: its addresses end where the whole space ends.
    store.set_network(ipaddress.IPv4Network("10.213.255.248/29"))
    made = [_make(store, f"top{i}") for i in range(5)]
    assert made[-1].address == "10.213.255.254"
    with pytest.raises(AddressSpaceExhausted):
        _make(store, "one-too-many")


def test_a_cloud_bound_to_a_lab_hands_out_addresses_inside_it(store: CloudStore) -> None:
    store.set_network(ipaddress.IPv4Network("10.213.150.0/29"))
    made = [_make(store, f"lab{i}") for i in range(5)]
    # .0 is the network, .1 the lab gateway, .7 the broadcast address.
    assert [i.address for i in made] == [f"10.213.150.{n}" for n in range(2, 7)]
    with pytest.raises(AddressSpaceExhausted, match=r"every address of 10\.213\.150\.0/29 is in use"):
        _make(store, "lab5")
    store.delete(made[1].id)
    assert _make(store, "lab6").address == "10.213.150.3"
    assert CloudStore(store.path).network() == ipaddress.IPv4Network("10.213.150.0/29")


def test_moving_the_network_away_and_back_never_gives_one_address_twice(store: CloudStore) -> None:
    first = _make(store, "a")  # 10.213.0.2, the whole /16
    gone = _make(store, "b")
    store.delete(gone.id)  # 10.213.0.3 given back
    store.set_network(ipaddress.IPv4Network("10.213.200.0/24"))
    assert _make(store, "c").address == "10.213.200.2"
    store.set_network(ipaddress.IPv4Network("10.213.0.0/16"))
    live = [first.address] + [_make(store, f"d{i}").address for i in range(3)]
    assert live == ["10.213.0.2", "10.213.0.3", "10.213.0.4", "10.213.0.5"]
    with pytest.raises(store_mod.InvalidParameterValue, match=r"must lie inside 10\.213\.0\.0/16"):
        store.set_network(ipaddress.IPv4Network("10.214.0.0/24"))


def test_tag_filter_matches_every_pair_and_values_literally(store: CloudStore) -> None:
    a = _make(store, "a", **{"xce:cluster": "demo", "xce:provider": "sim", "odd": HOSTILE})
    _make(store, "b", **{"xce:cluster": "demo", "xce:provider": "aws"})
    _make(store, "c", **{"xce:cluster": "other", "xce:provider": "sim"})
    got = store.list_instances({"xce:cluster": "demo", "xce:provider": "sim"})
    assert [i.id for i in got] == [a.id]
    assert got[0].tags["odd"] == HOSTILE
    assert len(store.list_instances({"xce:cluster": "demo"})) == 2
    assert store.list_instances({"odd": HOSTILE})[0].id == a.id
    assert store.list_instances({"xce:cluster": "nope"}) == []
    assert len(store.list_instances()) == 3
    store.delete(a.id)
    assert store.list_instances({"odd": HOSTILE}) == []
    assert [i.id for i in store.list_instances({"odd": HOSTILE}, include_terminated=True)] == [a.id]


def test_hostile_name_and_user_data_are_stored_byte_for_byte(store: CloudStore) -> None:
    inst = store.create_instance(HOSTILE, "f", "i", {HOSTILE: HOSTILE}, HOSTILE + "\x00end", HOSTILE)
    got = CloudStore(store.path).get(inst.id)
    assert got is not None
    assert (got.name, got.user_data, got.client_token) == (HOSTILE, HOSTILE + "\x00end", HOSTILE)
    assert dict(got.tags) == {HOSTILE: HOSTILE}


def test_update_tags_replaces_the_map(store: CloudStore) -> None:
    inst = _make(store, "t", a="1", b="2")
    updated = store.update_tags(inst.id, {"b": "3", "c": "4"})
    assert dict(updated.tags) == {"b": "3", "c": "4"}
    assert store.list_instances({"a": "1"}) == []
    store.delete(inst.id)
    with pytest.raises(InstanceNotFound):
        store.update_tags(inst.id, {})


def test_stop_and_start(store: CloudStore) -> None:
    inst = _make(store, "t")
    stopped = store.stop(inst.id)
    assert stopped.state == "stopped" and stopped.address == inst.address
    assert store.start(inst.id).state == "running"


def test_stop_and_start_keep_the_instance_and_are_api_calls(tmp_path: Path) -> None:
    tooling = CloudStore(tmp_path / "cloud.sqlite")
    inst = _make(tooling, "t", **{"xce:cluster": "demo"})
    api = CloudStore(tooling.path, api_faults=True)
    tooling.set_error_rate(1.0)
    # Like delete, a stop or start through the API can fail with a retryable error...
    with pytest.raises(CloudApiError, match="during stop"):
        api.stop(inst.id)
    with pytest.raises(CloudApiError, match="during start"):
        api.start(inst.id)
    tooling.clear_faults()
    stopped = api.stop(inst.id)
    # ... and a stopped instance keeps its id, address, tags and client token, listed by its tags.
    assert (stopped.state, stopped.state_reason) == ("stopped", "user-stop")
    assert (stopped.address, stopped.tags, stopped.client_token) == (inst.address, inst.tags, "t")
    assert [i.id for i in api.list_instances({"xce:cluster": "demo"})] == [inst.id]
    with pytest.raises(IdempotentParameterMismatch):  # its client token stays taken
        api.create_instance("other", "c8.large", "debian-12", {}, "", "t")


def test_out_of_band_delete_and_create(store: CloudStore) -> None:
    inst = _make(store, "t")
    gone = store.delete_out_of_band(inst.id)
    assert gone.state == "terminated" and gone.state_reason == "out-of-band-delete"
    assert store.delete_out_of_band(inst.id).state_reason == "out-of-band-delete"  # idempotent
    with pytest.raises(InstanceNotFound):
        store.delete_out_of_band("i-000000000000")
    stray = store.create_out_of_band("stray", "c8.large", "debian-12", {"xce:cluster": "demo"})
    assert stray.client_token == "" and stray.state == "running"
    assert [i.id for i in store.list_instances({"xce:cluster": "demo"})] == [stray.id]


def test_spot_reclaim_by_flavor_and_by_id(store: CloudStore) -> None:
    a = _make(store, "a", flavor="spot.small")
    b = _make(store, "b", flavor="spot.small")
    c = _make(store, "c", flavor="c8.large")
    store.stop(b.id)
    reclaimed = store.spot_reclaim(flavor="spot.small")
    assert [i.id for i in reclaimed] == [a.id]  # only running instances are reclaimed
    assert reclaimed[0].state_reason == "spot-reclaim"
    assert store.spot_reclaim(instance_id=c.id)[0].state == "terminated"
    assert store.spot_reclaim(instance_id=c.id) == []
    with pytest.raises(ValueError):
        store.spot_reclaim()


def test_faults_survive_and_are_seen_by_other_store_objects(store: CloudStore) -> None:
    store.set_error_rate(0.25, seed=11)
    store.set_capacity("c8.large", 3)
    store.set_slow_launch(1.5)
    other = CloudStore(store.path)
    faults = other.faults()
    assert (faults.error_rate, faults.seed, faults.slow_launch) == (0.25, 11, 1.5)
    assert dict(faults.capacity) == {"c8.large": 3}
    assert json.loads(json.dumps(faults.to_json()))["capacity"] == {"c8.large": 3}
    other.clear_faults()
    assert store.faults() == store_mod.FaultSettings()
    with pytest.raises(ValueError):
        store.set_error_rate(1.5)
    with pytest.raises(ValueError):
        store.set_slow_launch(-1)


def _outcomes(api: CloudStore, instance_id: str, n: int) -> list[bool]:
    out = []
    for _ in range(n):
        try:
            api.get(instance_id)
            out.append(True)
        except CloudApiError:
            out.append(False)
    return out


def test_seeded_error_rate_is_deterministic(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    tooling = CloudStore(path)
    inst = _make(tooling, "t")
    api = CloudStore(path, api_faults=True)
    tooling.set_error_rate(0.5, seed=42)
    first = _outcomes(api, inst.id, 60)
    tooling.set_error_rate(0.5, seed=42)  # setting the seed restarts the sequence
    second = _outcomes(CloudStore(path, api_faults=True), inst.id, 60)
    assert first == second
    assert first == [seeded_draw(42, n) >= 0.5 for n in range(1, 61)]
    assert 10 < first.count(False) < 50
    # Tooling (api_faults off) never fails at random.
    assert _outcomes(tooling, inst.id, 20) == [True] * 20


def test_api_error_is_retryable_and_names_the_operation(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    api = CloudStore(path, api_faults=True)
    api.set_error_rate(1.0)
    with pytest.raises(CloudApiError, match="during create") as err:
        _make(api, "t")
    assert isinstance(err.value, RetryableError)
    assert CloudStore(path).list_instances() == []  # a failed create leaves nothing behind
    api.set_error_rate(0.0)
    inst = _make(api, "t")
    api.set_error_rate(1.0)
    with pytest.raises(CloudApiError, match="during delete"):
        api.delete(inst.id)
    # Out-of-band tooling is not subject to the API error rate.
    assert api.delete_out_of_band(inst.id).state == "terminated"


def test_lost_response_creates_the_instance_and_a_retry_returns_it(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    api = CloudStore(path, api_faults=True)
    api.set_lost_response(1.0)
    with pytest.raises(CloudApiError, match="RequestTimeout"):
        _make(api, "op-3-0")
    made = CloudStore(path).list_instances()
    assert [i.client_token for i in made] == ["op-3-0"]
    api.set_lost_response(0.0)
    assert _make(api, "op-3-0").id == made[0].id  # the retry finds it: no twin
    assert api.faults().lost_response == 0.0
    with pytest.raises(ValueError):
        api.set_lost_response(2)


def test_slow_launch_sleeps_on_api_creates_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(faults_mod.time, "sleep", slept.append)  # the fault controls sleep
    path = tmp_path / "cloud.sqlite"
    api = CloudStore(path, api_faults=True)
    api.set_slow_launch(2.5)
    _make(api, "a")
    _make(CloudStore(path), "b")
    api.get("i-000000000000")
    assert slept == [2.5]


def test_changes_since_reports_each_change_once(store: CloudStore) -> None:
    v0, changed = store.changes_since(0)
    assert (v0, changed) == (0, [])
    a = _make(store, "a")
    b = _make(store, "b")
    v1, changed = store.changes_since(v0)
    assert [i.id for i in changed] == [a.id, b.id]
    store.delete(a.id)
    v2, changed = store.changes_since(v1)
    assert [(i.id, i.state) for i in changed] == [(a.id, "terminated")]
    assert store.changes_since(v2) == (v2, [])


# ----------------------------------------------------------------------------- concurrency

_CHILD = """
import sys
from pathlib import Path
from orchestrator.sim.cloud.store import CloudStore
store = CloudStore(Path(sys.argv[1]))
prefix, count = sys.argv[2], int(sys.argv[3])
for round_ in range(2):  # the second round retries every token: idempotent, nothing new
    for i in range(count):
        store.create_instance(f"{prefix}-{i}", "c8.large", "debian-12",
                              {"worker": prefix, "xce:cluster": "demo"}, "", f"{prefix}-{i}")
"""


def test_ten_threads_and_two_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    store = CloudStore(path)
    env = dict(os.environ)
    package_root = str(Path(orchestrator.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
    # 10 threads x 15 + 2 processes x 25 = 200 instances, each token created twice.
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(path), f"proc{n}", "25"], env=env) for n in range(2)]
    errors: list[BaseException] = []

    def work(prefix: str) -> None:
        try:
            for _round in range(2):
                for i in range(15):
                    store.create_instance(
                        f"{prefix}-{i}",
                        "c8.large",
                        "debian-12",
                        {"worker": prefix, "xce:cluster": "demo"},
                        "",
                        f"{prefix}-{i}",
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"thread{n}",)) for n in range(10)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert errors == []
    assert codes == [0, 0]
    live = CloudStore(path).list_instances({"xce:cluster": "demo"})
    assert len(live) == 200
    assert len({i.id for i in live}) == 200
    assert len({i.client_token for i in live}) == 200
    addresses = {i.address for i in live}
    assert len(addresses) == 200
    network = ipaddress.IPv4Network("10.213.0.0/16")
    for a in addresses:
        assert ipaddress.IPv4Address(a) in network
        assert a not in ("10.213.0.0", "10.213.0.1")
    per_worker = {w: sum(1 for i in live if i.tags["worker"] == w) for w in {i.tags["worker"] for i in live}}
    assert per_worker == {**{f"thread{n}": 15 for n in range(10)}, **{f"proc{n}": 25 for n in range(2)}}
