"""The ``xcesim`` provider's resource and data source, called directly (no Terraform binary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tf.iface import (
    CreateContext,
    DeleteContext,
    ImportContext,
    PlanContext,
    ReadContext,
    ReadDataContext,
    UpdateContext,
    UpgradeContext,
)
from tf.utils import Diagnostics

from orchestrator.sim.cloud.provider import (
    ImageResource,
    ImagesDataSource,
    InstanceResource,
    InstancesDataSource,
    XceSimProvider,
    _image_object_type,
    _instance_object_type,
    _StopIsNotShutdown,
)
from orchestrator.sim.cloud.store import CloudStore

HOSTILE = 'v"${x}%{y}\n<<EOF'


@pytest.fixture
def provider(tmp_path: Path) -> XceSimProvider:
    p = XceSimProvider()
    diags = Diagnostics()
    p.configure_provider(diags, {"store": str(tmp_path / "cloud.sqlite"), "max_retries": None})
    assert not diags.has_errors()
    return p


def _planned(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "h1",
        "flavor": "c8.large",
        "image": "debian-12",
        "tags": {"xce:cluster": "demo", "odd": HOSTILE},
        "user_data": HOSTILE,
        "client_token": "op-1-0",
        "id": None,
        "address": None,
        "launch_time": None,
        "state": None,
        "power_state": None,
    }
    base.update(over)
    return base


def test_create_read_update_delete(provider: XceSimProvider) -> None:
    res = InstanceResource(provider)
    diags = Diagnostics()
    state = res.create(CreateContext(diags, "xcesim_instance"), _planned())
    assert not diags.has_errors() and state is not None
    assert state["id"].startswith("i-") and state["state"] == "running"
    assert state["tags"]["odd"] == HOSTILE and state["user_data"] == HOSTILE
    assert res.read(ReadContext(diags, "xcesim_instance"), dict(state)) == state
    updated = res.update(UpdateContext(diags, "xcesim_instance"), state, {**state, "tags": {"a": "b"}})
    assert updated is not None and updated["tags"] == {"a": "b"}
    res.delete(DeleteContext(diags, "xcesim_instance"), updated)
    assert res.read(ReadContext(diags, "xcesim_instance"), updated) is None  # gone: drift "delete"
    res.delete(DeleteContext(diags, "xcesim_instance"), updated)  # already gone is success
    assert not diags.has_errors()


def test_null_optional_inputs_stay_null(provider: XceSimProvider) -> None:
    res = InstanceResource(provider)
    diags = Diagnostics()
    state = res.create(CreateContext(diags, "t"), _planned(tags=None, user_data=None, client_token=None))
    assert state is not None
    assert (state["tags"], state["user_data"], state["client_token"]) == (None, None, None)
    assert res.read(ReadContext(diags, "t"), state) == state


def test_capacity_error_becomes_the_diagnostic_summary(provider: XceSimProvider) -> None:
    provider.store.set_capacity("c8.large", 0)
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned()) is None
    assert [d.summary for d in diags.diagnostics] == ["InsufficientCapacity: flavor c8.large has no capacity (limit 0)"]


def test_retryable_error_is_reported_and_optionally_retried(provider: XceSimProvider) -> None:
    provider.store.set_error_rate(1.0)
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned()) is None
    assert diags.diagnostics[0].summary.startswith("InternalError:")
    assert "retryable" in (diags.diagnostics[0].detail or "")


def test_provider_retries_up_to_max_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.sim.cloud import provider as provider_mod

    monkeypatch.setattr(provider_mod.time, "sleep", lambda _s: None)
    p = XceSimProvider()
    p.configure_provider(Diagnostics(), {"store": str(tmp_path / "c.sqlite"), "max_retries": 50})
    p.store.set_error_rate(0.5, seed=1)
    diags = Diagnostics()
    for i in range(5):
        planned = _planned(client_token=f"t{i}")
        assert InstanceResource(p).create(CreateContext(diags, "t"), planned) is not None
    assert not diags.has_errors()


def test_data_source_lists_matching_live_instances(provider: XceSimProvider) -> None:
    res = InstanceResource(provider)
    diags = Diagnostics()
    a = res.create(CreateContext(diags, "t"), _planned(client_token="a"))
    res.create(CreateContext(diags, "t"), _planned(client_token="b", tags={"xce:cluster": "other"}))
    assert a is not None
    got = InstancesDataSource(provider).read(ReadDataContext(diags, "d"), {"tags": {"odd": HOSTILE}})
    assert got is not None
    assert [i["id"] for i in got["instances"]] == [a["id"]]
    assert set(got["instances"][0]) == set(json.loads(_instance_object_type().tf_type())[1])
    everything = InstancesDataSource(provider).read(ReadDataContext(diags, "d"), {"tags": None})
    assert everything is not None and len(everything["instances"]) == 2


def test_data_source_lists_recent_terminations_with_their_reason(provider: XceSimProvider) -> None:
    store = provider.store
    tags = {"xce:cluster": "demo"}
    live = store.create_out_of_band("live", "c8.large", "debian-12", tags)
    reclaimed = store.create_out_of_band("spot", "c8.large", "debian-12", tags)
    deleted = store.create_out_of_band("gone", "c8.large", "debian-12", tags)
    old = store.create_out_of_band("old", "c8.large", "debian-12", tags)
    store.spot_reclaim(instance_id=reclaimed.id)
    store.delete_out_of_band(deleted.id)
    store.delete_out_of_band(old.id)
    # Terminated two hours ago: past the hour a listing keeps terminated instances.
    conn = store._db.conn()
    conn.execute("UPDATE instances SET terminated_at = '2000-01-01T00:00:00Z' WHERE id = ?", (old.id,))
    source = InstancesDataSource(provider)
    diags = Diagnostics()
    got = source.read(ReadDataContext(diags, "d"), {"tags": tags, "recently_terminated": True})
    assert got is not None and not diags.has_errors()
    assert [(i["id"], i["state"], i["state_reason"]) for i in got["instances"]] == [
        (live.id, "running", ""),
        (reclaimed.id, "terminated", "spot-reclaim"),
        (deleted.id, "terminated", "out-of-band-delete"),
    ]
    plain = source.read(ReadDataContext(diags, "d"), {"tags": tags, "recently_terminated": None})
    assert plain is not None and [i["id"] for i in plain["instances"]] == [live.id]


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method


class _Server:
    def __init__(self) -> None:
        self.stops: list[float] = []

    def stop(self, grace: float) -> None:
        self.stops.append(grace)


def test_stop_provider_lets_calls_in_flight_finish_and_shutdown_ends_the_server() -> None:
    interceptor = _StopIsNotShutdown()
    server = _Server()
    interceptor.server = server
    assert interceptor.intercept_service(lambda d: "handled", _Details("/tfplugin6.Provider/StopProvider")) == "handled"
    assert not interceptor.stopped and server.stops == []
    interceptor.intercept_service(lambda d: "handled", _Details("/plugin.GRPCController/Shutdown"))
    assert interceptor.stopped and server.stops == [0]


def test_import_adopts_a_live_instance(provider: XceSimProvider) -> None:
    stray = provider.store.create_out_of_band("stray", "c8.large", "debian-12", {"k": "v"})
    diags = Diagnostics()
    state = InstanceResource(provider).import_(ImportContext(diags, "t"), stray.id)
    assert state is not None and state["id"] == stray.id and state["tags"] == {"k": "v"}
    assert InstanceResource(provider).import_(ImportContext(diags, "t"), "i-000000000000") is None
    assert diags.has_errors()


def test_configuration_problems_are_diagnostics(tmp_path: Path) -> None:
    diags = Diagnostics()
    XceSimProvider().validate_config(diags, {"store": " ", "max_retries": -1})
    assert len(diags.diagnostics) == 2
    diags = Diagnostics()
    XceSimProvider().configure_provider(diags, {"store": None})
    assert diags.has_errors()


def test_object_type_is_valid_terraform_type_json() -> None:
    kind, attrs = json.loads(_instance_object_type().tf_type())
    assert kind == "object"
    assert attrs["tags"] == ["map", "string"] and attrs["id"] == "string"
    assert CloudStore  # the provider's store type is the public store


def test_unexpected_failures_become_diagnostics(provider: XceSimProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    def locked(*_a: object, **_k: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    def broken(*_a: object, **_k: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(provider.store, "create_instance", locked)
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned()) is None
    assert diags.diagnostics[-1].summary.startswith("RequestLimitExceeded: simulated cloud store busy")
    monkeypatch.setattr(provider.store, "create_instance", broken)
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned()) is None
    assert diags.diagnostics[-1].summary == "InternalFailure: KeyError: 'boom'"


OWNER = {"xce:cluster": "demo", "xce:provider": "sim"}


def _configured(tmp_path: Path, **config: object) -> XceSimProvider:
    p = XceSimProvider()
    diags = Diagnostics()
    p.configure_provider(diags, {"store": str(tmp_path / "cloud.sqlite"), "max_retries": None, **config})
    assert not diags.has_errors()
    return p


def _fenced_provider(tmp_path: Path, fence: str | None) -> XceSimProvider:
    return _configured(tmp_path, fence=fence)


def test_the_provider_journals_its_runs_fence(tmp_path: Path) -> None:
    res = InstanceResource(_fenced_provider(tmp_path, "12.3"))
    diags = Diagnostics()
    state = res.create(CreateContext(diags, "xcesim_instance"), _planned(client_token="op-1-0", tags=OWNER))
    assert state is not None
    updated = res.update(UpdateContext(diags, "xcesim_instance"), state, {**state, "tags": {**OWNER, "a": "b"}})
    assert updated is not None
    # The next run (another walk, another command) carries its own fence.
    later = InstanceResource(_fenced_provider(tmp_path, None))
    later.delete(DeleteContext(diags, "xcesim_instance"), updated)
    assert not diags.has_errors()
    journal = CloudStore(tmp_path / "cloud.sqlite").mutations()
    assert [(m.provider, m.action, m.client_token, m.epoch, m.reason) for m in journal] == [
        ("sim", "create", "op-1-0", "12.3", ""),
        ("sim", "update-tags", "op-1-0", "12.3", ""),
        ("sim", "delete", "op-1-0", "", "user-terminate"),
    ]


@pytest.mark.parametrize("fence", ["3.7", "none", "", "0.0", "18446744073709551615.1"])
def test_the_provider_accepts_epoch_tags_as_fence(tmp_path: Path, fence: str) -> None:
    diags = Diagnostics()
    XceSimProvider().validate_config(diags, {"store": str(tmp_path / "s"), "fence": fence})
    assert not diags.has_errors()


@pytest.mark.parametrize("fence", ["3", "3.7\n", " 3.7", "-1.2", "3.7.1", "None", "x.y", "1" * 21 + ".1"])
def test_the_provider_refuses_a_malformed_fence(tmp_path: Path, fence: str) -> None:
    diags = Diagnostics()
    XceSimProvider().validate_config(diags, {"store": str(tmp_path / "s"), "fence": fence})
    assert [d.summary for d in diags.diagnostics] == [
        f"xcesim: fence {fence!r} is not an epoch tag <term>.<seq>, none or empty"
    ]


def test_power_state_stops_and_starts_in_place_and_journals_under_the_fence(tmp_path: Path) -> None:
    res = InstanceResource(_fenced_provider(tmp_path, "4.2"))
    diags = Diagnostics()
    state = res.create(CreateContext(diags, "xcesim_instance"), _planned(tags=OWNER, power_state="running"))
    assert state is not None and state["power_state"] == "running"
    want = {**state, "power_state": "stopped"}
    # The plan of a power change is an in-place update that reaches the asked state.
    planned = res.plan(PlanContext(diags, "xcesim_instance", changed_fields={"power_state"}), state, dict(want))
    assert planned["state"] == "stopped"
    stopped = res.update(UpdateContext(diags, "xcesim_instance"), state, planned)
    assert stopped is not None
    assert (stopped["id"], stopped["address"], stopped["tags"]) == (state["id"], state["address"], state["tags"])
    assert (stopped["state"], stopped["power_state"]) == ("stopped", "stopped")
    assert res.read(ReadContext(diags, "xcesim_instance"), stopped) == stopped
    started = res.update(UpdateContext(diags, "xcesim_instance"), stopped, {**stopped, "power_state": "running"})
    assert started is not None and started["state"] == "running"
    assert not diags.has_errors()
    journal = CloudStore(tmp_path / "cloud.sqlite").mutations()
    # Only the power changed: no tag update is journalled.
    assert [(m.action, m.reason, m.epoch) for m in journal] == [
        ("create", "", "4.2"),
        ("stop", "", "4.2"),
        ("start", "", "4.2"),
    ]


def test_power_state_stopped_at_create_and_drift_of_an_out_of_band_start(provider: XceSimProvider) -> None:
    res = InstanceResource(provider)
    diags = Diagnostics()
    state = res.create(CreateContext(diags, "t"), _planned(power_state="stopped"))
    assert state is not None and (state["state"], state["power_state"]) == ("stopped", "stopped")
    provider.store.start(state["id"])  # behind Terraform's back
    refreshed = res.read(ReadContext(diags, "t"), state)
    assert refreshed is not None and refreshed["power_state"] == "running"  # a diff against "stopped"
    # Without power_state the instance's power is nobody's business: no diff.
    plain = res.create(CreateContext(diags, "t"), _planned(client_token="op-1-1"))
    assert plain is not None and plain["power_state"] is None
    provider.store.stop(plain["id"])
    assert res.read(ReadContext(diags, "t"), plain) == {**plain, "state": "stopped"}
    assert not diags.has_errors()


def test_power_state_is_running_or_stopped() -> None:
    diags = Diagnostics()
    InstanceResource.validate(InstanceResource(XceSimProvider()), diags, "xcesim_instance", {"power_state": "off"})
    assert [d.summary for d in diags.diagnostics] == ["xcesim: power_state 'off' is not one of running, stopped"]


def test_a_state_from_before_power_state_and_zones_upgrades_to_null(provider: XceSimProvider) -> None:
    diags = Diagnostics()
    old = {k: v for k, v in _planned(id="i-1").items() if k not in ("power_state", "zone", "subnet")}
    upgraded = InstanceResource(provider).upgrade(UpgradeContext(diags, "t"), 1, old)
    assert upgraded == {**old, "power_state": None, "zone": None, "subnet": None}


def test_image_resource_create_read_update_delete_and_listing(provider: XceSimProvider) -> None:
    diags = Diagnostics()
    inst = InstanceResource(provider).create(CreateContext(diags, "t"), _planned(tags=OWNER))
    assert inst is not None
    res = InstanceResource(provider), ImageResource(provider)
    planned = {"name": "cpu", "instance_id": inst["id"], "tags": OWNER, "id": None}
    image = res[1].create(CreateContext(diags, "xcesim_image"), planned)
    assert image is not None and image["id"].startswith("img-")
    assert (image["source_image"], image["state"], image["tags"]) == ("debian-12", "available", OWNER)
    assert res[1].read(ReadContext(diags, "xcesim_image"), image) == image
    listed = ImagesDataSource(provider).read(ReadDataContext(diags, "d"), {"tags": {"xce:cluster": "demo"}})
    assert listed is not None and [i["id"] for i in listed["images"]] == [image["id"]]
    assert set(listed["images"][0]) == set(json.loads(_image_object_type().tf_type())[1])
    updated = res[1].update(UpdateContext(diags, "xcesim_image"), image, {**image, "tags": {**OWNER, "k": "v"}})
    assert updated is not None and updated["tags"]["k"] == "v"
    # An instance launched from it names it as its image.
    child = res[0].create(CreateContext(diags, "t"), _planned(image=image["id"], client_token="op-1-1"))
    assert child is not None and child["image"] == image["id"]
    res[1].delete(DeleteContext(diags, "xcesim_image"), updated)
    assert res[1].read(ReadContext(diags, "xcesim_image"), updated) is None  # gone: drift "delete"
    res[1].delete(DeleteContext(diags, "xcesim_image"), updated)  # already gone is success
    assert not diags.has_errors()


def test_image_refusals_are_diagnostics(provider: XceSimProvider) -> None:
    diags = Diagnostics()
    planned = {"name": "cpu", "instance_id": "i-000000000000", "tags": None, "id": None}
    assert ImageResource(provider).create(CreateContext(diags, "xcesim_image"), planned) is None
    assert [d.summary for d in diags.diagnostics] == ["InvalidInstanceID.NotFound: no live instance i-000000000000"]
    diags = Diagnostics()
    assert InstanceResource(provider).create(CreateContext(diags, "t"), _planned(image="img-000000000000")) is None
    assert [d.summary for d in diags.diagnostics] == ["InvalidAMIID.NotFound: no available image img-000000000000"]


def test_a_start_writes_the_runs_join_token_into_the_boot_copy(tmp_path: Path) -> None:
    user_data = "#cloud-config\nwrite_files:\n- {path: /etc/xce/ca.pem, content: CA}\n"
    # A warm-pool instance launched stopped with the token of its fill op...
    filled = InstanceResource(_configured(tmp_path, join_tokens={"op-1-0": "v2.1.old"}))
    diags = Diagnostics()
    state = filled.create(CreateContext(diags, "t"), _planned(user_data=user_data, power_state="stopped"))
    assert state is not None and state["state"] == "stopped"
    # ...started by a later run whose configuration carries a fresh one: the host boots with it.
    provider = _configured(tmp_path, join_tokens={"op-1-0": "v2.2.fresh"})
    started = InstanceResource(provider).update(UpdateContext(diags, "t"), state, {**state, "power_state": "running"})
    assert started is not None and started["state"] == "running" and not diags.has_errors()
    [boot] = provider.store.boot_copies().values()
    files = {f["path"]: f for f in yaml.safe_load(boot)["write_files"]}
    assert files["/etc/xce/join-token"]["content"] == "v2.2.fresh\n"
    assert files["/etc/xce/join-token"]["permissions"] == "0600" and "v2.1.old" not in boot
    assert files["/etc/xce/ca.pem"]["content"] == "CA"
    assert "fresh" not in json.dumps(started) and "fresh" not in provider.store.get(state["id"]).user_data  # type: ignore[union-attr]
    # A stop never touches it; a start without a token keeps the copy it has.
    stopped = InstanceResource(provider).update(
        UpdateContext(diags, "t"), started, {**started, "power_state": "stopped"}
    )
    plain = _configured(tmp_path, join_tokens={})
    again = InstanceResource(plain).update(UpdateContext(diags, "t"), stopped, {**stopped, "power_state": "running"})
    assert again is not None and again["state"] == "running" and plain.store.boot_copies() == {state["id"]: boot}
