"""``xceprov sim up|status|down|hosts`` through click, without root (nothing is started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.sim import world

DEFAULTS = Path(__file__).resolve().parents[4] / "orchestrator" / "defaults" / "xceprov.yaml"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(world, "_is_root", lambda: False)
    monkeypatch.setattr(world, "_controller_available", lambda: False)
    monkeypatch.setattr(world, "ensure_toolkit_key", lambda state_dir: state_dir / "ssh" / "id_ed25519")
    data = yaml.safe_load(DEFAULTS.read_text())
    data["sim"] = {"state_dir": str(tmp_path / "sim")}
    path = tmp_path / "xceprov.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--config", str(config), "sim", *args])
    return result.exit_code, result.stdout, result.stderr


def test_up_without_root_says_why_hosts_are_unavailable(config: Path) -> None:
    code, out, err = run(config, "up")
    assert code == 0
    assert "simulated hosts unavailable" in err and "root" in err
    assert "host-manager  unavailable" in out


def test_status_json_shape(config: Path, tmp_path: Path) -> None:
    code, out, _ = run(config, "status", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["state_dir"] == str((tmp_path / "sim").resolve())
    assert data["lab"]["gateway"] == "10.213.0.1" and data["lab"]["up"] is False
    assert [c["name"] for c in data["components"]] == ["host-manager", "controller"]
    assert data["hosts"] == []
    assert data["ssh_key"].endswith("/ssh/id_ed25519")


def test_hosts_list_and_ssh_config_with_no_hosts(config: Path) -> None:
    assert run(config, "hosts", "list", "--json")[1].strip() == "[]"
    code, out, _ = run(config, "hosts", "ssh-config")
    assert code == 0 and "StrictHostKeyChecking yes" in out


def test_bad_lab_subnet_is_one_line(config: Path) -> None:
    code, _, err = run(config, "up", "--lab-subnet", "192.168.0.0/24")
    assert code != 0
    assert err.strip().count("\n") == 0 and "10.213.0.0/16" in err


def test_up_warns_when_the_worker_address_misses_the_lab_gateway(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = yaml.safe_load(config.read_text())
    data["controller"]["addresses"] = ["127.0.0.1:17442"]  # worker_addresses stays 10.213.0.1:7441
    config.write_text(yaml.safe_dump(data))
    started: list[world.WorldSettings] = []

    def fake_up(settings: world.WorldSettings, only: str | None = None) -> world.WorldStatus:
        started.append(settings)
        running = [
            world.ComponentStatus(world.HOST_MANAGER, "running", 1),
            world.ComponentStatus(world.CONTROLLER, "running", 2),
        ]
        return world.WorldStatus(settings.state_dir, settings.lab, True, running, [], settings.state_dir / "kh")

    monkeypatch.setattr(world, "up", fake_up)
    code, _, err = run(config, "up", "--lab-name", "t5", "--lab-subnet", "10.213.154.0/24")
    assert code == 0
    assert started[0].controller_port == 17442  # from controller.addresses
    assert err.strip() == (
        "xceprov: warning: controller.worker_addresses 10.213.0.1:7441 does not name 10.213.154.1:17442, "
        "where this world's controller listens for its hosts (lab t5)"
    )
