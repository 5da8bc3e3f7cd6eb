"""World settings and the status without root (no processes are started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.sim import world


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
