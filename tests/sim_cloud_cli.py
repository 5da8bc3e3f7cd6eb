"""The simulated cloud's command line in a test: a site of the shipped defaults in a temporary
directory (the ``sim_site`` fixture of tests/unit/sim/cloud/conftest.py), a command run against it,
and the cloud store it uses."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

import orchestrator
from orchestrator.cli.main import cli
from orchestrator.sim.cloud.store import CloudStore


def write_sim_site(tmp_path: Path) -> Path:
    """``xceprov.yaml`` of the shipped defaults with its state and simulated world under ``tmp_path``."""
    defaults = Path(orchestrator.__file__).parent / "defaults" / "xceprov.yaml"
    doc = yaml.safe_load(defaults.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    doc["sim"] = {"state_dir": str(tmp_path / "sim")}
    path = tmp_path / "xceprov.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_cli(config: Path, *args: str) -> tuple[int, str, str]:
    """``xceprov --config CONFIG ARGS...``: exit code, stdout, stderr."""
    result = CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def cloud_store(config: Path) -> CloudStore:
    """The simulated cloud's store of the site at ``config``."""
    return CloudStore(config.parent / "sim" / "cloud.sqlite")
