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
