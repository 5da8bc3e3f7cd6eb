"""World settings and the status without root (no processes are started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.sim import world
from orchestrator.sim.cloud.store import CloudStore


def test_settings_default_then_recorded(tmp_path: Path) -> None:
    s = world.settings_for(tmp_path)
    assert str(s.lab.subnet) == "10.213.0.0/16" and s.controller_port == 7441
    s = world.settings_for(tmp_path, lab_name="t1", lab_subnet="10.213.150.0/24", controller_port=17441)
    world._save(s)
    again = world.settings_for(tmp_path)
    assert again.lab == s.lab and again.controller_port == 17441
    with pytest.raises(UsageError):
        world.settings_for(tmp_path, controller_port=70000)


def test_without_root_hosts_are_unavailable_and_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world, "_is_root", lambda: False)
    monkeypatch.setattr(world, "_controller_available", lambda: False)
    monkeypatch.setattr(world, "ensure_toolkit_key", lambda state_dir: state_dir / "ssh" / "id_ed25519")
    st = world.up(world.settings_for(tmp_path))
    hm = st.component(world.HOST_MANAGER)
    assert hm.state == "unavailable" and "root" in hm.detail
    assert st.component(world.CONTROLLER).state == "unavailable"
    assert st.to_json()["lab"]["up"] is False
    assert st.hosts == []
    down = world.down(world.settings_for(tmp_path))
    assert down.component(world.HOST_MANAGER).state == "unavailable"


def test_the_controller_port_is_the_configured_one_unless_given(tmp_path: Path) -> None:
    configured = ["ctl.example.org:9000", "127.0.0.1:17555", "[::1]:17556"]
    assert world.settings_for(tmp_path, configured_addresses=configured).controller_port == 17555
    assert world.settings_for(tmp_path, controller_port=17600, configured_addresses=configured).controller_port == 17600
    # A configuration naming a controller elsewhere leaves the simulated one on its default port.
    assert world.settings_for(tmp_path, configured_addresses=["ctl.example.org:9000"]).controller_port == 7441
    assert world.settings_for(tmp_path, configured_addresses=["[::1]:17556"]).controller_port == 17556


def test_a_worker_address_off_the_lab_gateway_is_named(tmp_path: Path) -> None:
    s = world.settings_for(tmp_path, lab_subnet="10.213.150.0/24", controller_port=17441)
    assert world.lab_unreachable(s, ["10.213.150.1:17441"]) is None
    warning = world.lab_unreachable(s, ["10.213.0.1:7441"])
    assert warning == (
        "controller.worker_addresses 10.213.0.1:7441 does not name 10.213.150.1:17441, "
        "where this world's controller listens for its hosts (lab xce)"
    )


def test_up_binds_the_cloud_to_the_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world, "_is_root", lambda: False)
    monkeypatch.setattr(world, "_controller_available", lambda: False)
    monkeypatch.setattr(world, "ensure_toolkit_key", lambda state_dir: state_dir / "ssh" / "id_ed25519")
    world.up(world.settings_for(tmp_path, lab_name="t2", lab_subnet="10.213.151.0/24"))
    inst = CloudStore(tmp_path / "cloud.sqlite").create_instance("n", "c8.large", "debian-12", {}, "", "tok")
    assert inst.address == "10.213.151.2"
    # The next world on the default lab (after down, up without options) is bound back to it.
    world.down(world.settings_for(tmp_path))
    world.up(world.settings_for(tmp_path))
    again = CloudStore(tmp_path / "cloud.sqlite").create_instance("m", "c8.large", "debian-12", {}, "", "tok2")
    assert again.address == "10.213.0.2"


def test_up_on_another_lab_while_the_world_runs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world, "_is_root", lambda: False)
    monkeypatch.setattr(world, "_controller_available", lambda: False)
    monkeypatch.setattr(world, "ensure_toolkit_key", lambda state_dir: state_dir / "ssh" / "id_ed25519")
    world.up(world.settings_for(tmp_path, lab_name="t3", lab_subnet="10.213.152.0/24", controller_port=17441))
    monkeypatch.setattr(world, "_running_pid", lambda settings, name, marker: 4242)  # its controller runs
    other = world.settings_for(tmp_path, lab_name="t4", lab_subnet="10.213.153.0/24")
    with pytest.raises(UsageError) as refused:
        world.up(other)
    assert str(refused.value) == (
        f"the simulated world in {tmp_path.resolve()} runs on lab t3 (10.213.152.0/24) with controller port "
        "17441; run 'xceprov sim down' before starting it on another lab or port"
    )
    # Nothing was recorded or bound: the cloud still hands out addresses in the running lab.
    assert world.settings_for(tmp_path).lab.name == "t3"
    assert str(CloudStore(tmp_path / "cloud.sqlite").network()) == "10.213.152.0/24"
    world.up(world.settings_for(tmp_path))  # the same settings: idempotent
