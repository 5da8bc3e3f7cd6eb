"""What the configuration takes from a systemd unit: ``$STATE_DIRECTORY`` and ``credential:NAME``.

contrib/systemd/xceprov.service runs the daemon as its own user with ``StateDirectory=`` and
``LoadCredential=``; systemd hands both over as environment variables (systemd.exec(5)).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from tests.cli_run import xceprov
from tests.unit.test_config import GOOD  # one small valid site for every configuration test

CREDENTIALS = """
cluster: site1
controller:
  ca: credential:ca.pem
  client_cert: credential:client.pem
  client_key: credential:client.key
  join_key: credential:join.key
ansible: {ssh_key: credential:ssh.key}
providers:
  sim: {module: xcesim, max_instances: 10}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}
"""
NAMES = ("ca.pem", "client.pem", "client.key", "join.key", "ssh.key")


def credentials_dir(tmp_path: Path) -> Path:
    """A directory laid out as systemd lays out LoadCredential= copies."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    for name in NAMES:
        (directory / name).write_text(f"{name}\n")
    return directory


def problems(text: str, environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.yaml", Path("/srv/site"), environ)
    return info.value.problems


def test_state_dir_is_systemds_state_directory_when_the_file_leaves_it_out() -> None:
    # StateDirectory=xceprov xceprov/home: systemd joins the two with ':'; the first is state_dir.
    environ = {"STATE_DIRECTORY": "/var/lib/xceprov:/var/lib/xceprov/home"}
    config = parse_config(GOOD, "site.yaml", Path("/srv/site"), environ).config
    assert config.state_dir == Path("/var/lib/xceprov")
    assert config.sim_state_dir() == Path("/var/lib/xceprov/sim")


def test_a_state_dir_the_file_names_wins_and_without_systemd_the_default_stays() -> None:
    environ = {"STATE_DIRECTORY": "/var/lib/xceprov"}
    named = parse_config(GOOD + "state_dir: /srv/state\n", "site.yaml", Path("/srv/site"), environ)
    assert named.config.state_dir == Path("/srv/state")
    assert parse_config(GOOD, "site.yaml", Path("/srv/site"), {}).config.state_dir == Path("/srv/site/.xceprov")


def test_a_relative_state_directory_is_refused_in_one_line() -> None:
    assert problems(GOOD, {"STATE_DIRECTORY": "xceprov"}) == [
        "site.yaml: state_dir: not set, and $STATE_DIRECTORY ('xceprov') is not absolute"
    ]


def test_credential_names_resolve_in_the_credentials_directory(tmp_path: Path) -> None:
    directory = credentials_dir(tmp_path)
    config = parse_config(CREDENTIALS, "site.yaml", Path("/srv/site"), {"CREDENTIALS_DIRECTORY": str(directory)}).config
    assert config.controller.ca == directory / "ca.pem"
    assert config.controller.client_cert == directory / "client.pem"
    assert config.controller.client_key == directory / "client.key"
    assert config.controller.join_key == directory / "join.key"
    assert config.ansible.ssh_key == directory / "ssh.key"


def test_credentials_without_systemd_are_one_line_each() -> None:
    found = problems(CREDENTIALS, {})
    assert len(found) == len(NAMES)
    assert (
        "site.yaml: controller.client_key: 'credential:client.key' needs $CREDENTIALS_DIRECTORY, "
        "which is not set (systemd sets it for a unit with LoadCredential=)"
    ) in found
    assert any(p.startswith("site.yaml: ansible.ssh_key: 'credential:ssh.key' needs") for p in found)


@pytest.mark.parametrize("name", ["../../etc/shadow", "..", ".", "", "a/b"])
def test_a_credential_name_that_is_not_one_file_name_is_refused(tmp_path: Path, name: str) -> None:
    directory = credentials_dir(tmp_path)
    text = CREDENTIALS.replace("credential:join.key", f"'credential:{name}'")
    found = problems(text, {"CREDENTIALS_DIRECTORY": str(directory)})
    assert len(found) == 1 and found[0].startswith("site.yaml: controller.join_key: "), found
    assert "a credential name is one file name" in found[0]


def test_a_credential_the_unit_does_not_load_is_named(tmp_path: Path) -> None:
    directory = credentials_dir(tmp_path)
    (directory / "join.key").unlink()
    assert problems(CREDENTIALS, {"CREDENTIALS_DIRECTORY": str(directory)}) == [
        f"site.yaml: controller.join_key: 'credential:join.key': no credential 'join.key' in {directory} "
        "(LoadCredential=join.key:... in the unit)"
    ]


def test_through_the_cli_a_missing_credentials_directory_is_exit_3_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "xceprov.yaml").write_text(CREDENTIALS.replace("credential:ssh.key", "credential:../ssh.key"))
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    done = xceprov(site, "validate", "-q")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(NAMES) and "Traceback" not in done.stderr
    assert f"{site / 'xceprov.yaml'}: ansible.ssh_key: 'credential:../ssh.key': a credential name is one file name" in (
        done.stderr
    )
