"""``xceprov init [DIR] [--provider sim|aws|openstack]`` (issue 28, item 2; docs/cli.md, "xceprov init").

The simulated world's starting file validates as written; a real provider's skeleton holds every
required key, with each site-specific value marked ``CHANGE-ME``, refused (one line per marked
key, nothing else) until filled in, and valid once filled in; an existing file is never
overwritten.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.configfile import parse_config
from orchestrator.paths import toolkit_root
from orchestrator.services.init import starting_text
from orchestrator.workspace.module_settings import settings_problems


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_init_writes_the_simulated_world_s_file_and_it_validates(tmp_path: Path) -> None:
    site = tmp_path / "new" / "site"  # made when missing
    code, out, err = _invoke("init", str(site))
    assert code == 0, err
    written = site / "xceprov.yaml"
    assert out.splitlines()[0] == f"wrote {written}"
    text = written.read_text()
    assert text.startswith("# xceprov.yaml: the embedded simulated world (written by `xceprov init`)")
    assert "CHANGE-ME" not in text
    code, out, err = _invoke("--config", str(written), "validate", "-q")
    assert (code, out) == (0, ""), err
    # Its relative paths are the new file's directory's, not the caller's.
    loaded = parse_config(text, str(written), site)
    assert loaded.config.state_dir == site / ".xceprov"


@pytest.mark.parametrize("provider", ["aws", "openstack"])
def test_a_provider_skeleton_is_refused_key_by_key_until_filled_in(tmp_path: Path, provider: str) -> None:
    code, out, err = _invoke("init", "--provider", provider, str(tmp_path))
    assert code == 0, err
    written = tmp_path / "xceprov.yaml"
    listed = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    # What only the site knows is marked: the controller, the login, the provider's place, the image.
    for key in (
        "cluster",
        "controller.addresses.0",
        "controller.worker_addresses.0",
        "controller.ca",
        "controller.client_cert",
        "controller.client_key",
        "controller.join_key",
        "ansible.ssh_user",
        "ansible.ssh_key",
        f"providers.{provider}.settings.region",
        f"templates.cpu.providers.{provider}.flavor",
        f"templates.cpu.providers.{provider}.image",
    ):
        assert key in listed, (key, listed)

    code, _out, err = _invoke("--config", str(written), "validate")
    assert code == 3
    # One line per marked key and nothing else: no required key is missing from the skeleton.
    lines = err.splitlines()
    assert [line.split(": ")[2] for line in lines] == listed, err
    assert all(line.endswith("a site-specific value to fill in (xceprov init marked it CHANGE-ME)") for line in lines)

    # Filled in, it is a configuration with every setting its module requires.
    filled = written.read_text().replace("CHANGE-ME", "site1")
    loaded = parse_config(filled, str(written), tmp_path)
    assert list(loaded.config.providers) == [provider]
    assert settings_problems(loaded.config, toolkit_root(), str(written)) == []
    assert yaml.safe_load(filled)["providers"][provider]["module"] == provider


def test_init_never_overwrites_a_file(tmp_path: Path) -> None:
    written = tmp_path / "xceprov.yaml"
    written.write_text("cluster: mine\n")
    code, out, err = _invoke("init", "--provider", "aws", str(tmp_path))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"xceprov: {written}: already exists; nothing written "
        "(xceprov init never overwrites: move it away or give another DIR)"
    ]
    assert written.read_text() == "cluster: mine\n"
    # Nor the file a dangling link names.
    other = tmp_path / "other"
    other.mkdir()
    (other / "xceprov.yaml").symlink_to(tmp_path / "nowhere.yaml")
    code, _out, err = _invoke("init", str(other))
    assert code == 1 and "already exists; nothing written" in err
    assert not (tmp_path / "nowhere.yaml").exists()


def test_init_into_a_file_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    code, _out, err = _invoke("init", str(blocker))
    assert code == 2 and "Traceback" not in err  # click: DIR must be a directory
    code, _out, err = _invoke("init", str(blocker / "site"))
    assert code == 1
    assert err.splitlines() == [f"xceprov: {blocker / 'site' / 'xceprov.yaml'}: cannot write: Not a directory"]


def _controller(written: Path) -> tuple[list[str], list[str]]:
    controller = yaml.safe_load(written.read_text())["controller"]
    return controller["addresses"], controller["worker_addresses"]


def test_init_puts_a_second_world_s_controller_where_its_lab_and_port_say(tmp_path: Path) -> None:
    """A second simulated world on one machine (docs/simulated-world.md): the file names its own
    port and its lab's gateway, so `sim up --lab-subnet` agrees with it unedited."""
    code, _out, err = _invoke("init", str(tmp_path), "--controller-port", "7542", "--lab-subnet", "10.213.200.0/24")
    assert code == 0, err
    written = tmp_path / "xceprov.yaml"
    assert _controller(written) == (["127.0.0.1:7542"], ["10.213.200.1:7542"])
    assert "# the simulated lab gateway, as seen from simulated hosts" in written.read_text()  # comments kept
    code, out, err = _invoke("--config", str(written), "validate", "-q")
    assert (code, out) == (0, ""), err


def test_init_and_sim_up_take_the_world_from_the_environment(tmp_path: Path) -> None:
    env = {"XCEPROV_CONTROLLER_PORT": "7643", "XCEPROV_LAB_SUBNET": "10.213.201.0/24"}
    result = CliRunner(env=env).invoke(cli, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert _controller(tmp_path / "xceprov.yaml") == (["127.0.0.1:7643"], ["10.213.201.1:7643"])
    # The same variables reach `sim up`: a subnet outside the lab space is refused, naming it,
    # before anything starts.
    bad = {"XCEPROV_CONFIG": str(tmp_path / "xceprov.yaml"), "XCEPROV_LAB_SUBNET": "10.99.0.0/24"}
    result = CliRunner(env=bad).invoke(cli, ["sim", "up", "--only", "controller"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "xceprov: lab subnet 10.99.0.0/24 must lie inside 10.213.0.0/16 (a /16 to a /29)"
    ]
    assert not (tmp_path / ".xceprov" / "sim" / "run").exists()


def test_the_world_s_place_is_for_the_simulated_world_s_file_only(tmp_path: Path) -> None:
    code, out, err = _invoke("init", "--provider", "aws", "--controller-port", "7542", str(tmp_path))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["xceprov: --controller-port: only for the simulated world's file (--provider sim)"]
    assert not (tmp_path / "xceprov.yaml").exists()
    # Exported for a simulated world, the variables leave a real provider's skeleton as it is.
    env = {"XCEPROV_CONTROLLER_PORT": "7542", "XCEPROV_LAB_SUBNET": "10.213.200.0/24"}
    result = CliRunner(env=env).invoke(cli, ["init", "--provider", "aws", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "xceprov.yaml").read_text() == starting_text("aws")


def test_a_lab_subnet_outside_the_lab_space_writes_nothing(tmp_path: Path) -> None:
    code, _out, err = _invoke("init", str(tmp_path), "--lab-subnet", "192.168.0.0/24")
    assert code == 1
    assert err.splitlines() == ["xceprov: lab subnet 192.168.0.0/24 must lie inside 10.213.0.0/16 (a /16 to a /29)"]
    assert not (tmp_path / "xceprov.yaml").exists()
