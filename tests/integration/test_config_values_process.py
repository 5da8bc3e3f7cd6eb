"""Hostile configuration values through the installed command as a process (the unit tests drive
the same command line in-process, for every value and verb: tests/unit/cli/test_cli_config_values.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import xceprov

pytestmark = pytest.mark.integration

SITE = """\
cluster: values
state_dir: state
standalone: true
controller: {ca: system, lease_margin: 2s}
providers:
  sim: {module: xcesim, idle_time: 20s}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12}
"""


@pytest.mark.parametrize(
    ("old", "new", "verb", "line"),
    [
        ("idle_time: 20s", "idle_time: .nan", "validate", "providers.sim.idle_time: not a number (.nan)"),
        ("lease_margin: 2s", "lease_margin: " + "9" * 400, "plan", "controller.lease_margin: the number 99999"),
        ("idle_time: 20s", "idle_time: 2024-01-01", "plan", "providers.sim.idle_time: a YAML date (2024-01-01)"),
    ],
    ids=["nan-validate", "huge-plan", "date-plan"],
)
def test_a_hostile_value_is_one_line_from_the_process(tmp_path: Path, old: str, new: str, verb: str, line: str) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE.replace(old, new))
    done = xceprov(tmp_path, verb, *(["cpu=1"] if verb == "plan" else []))
    assert done.returncode == 3
    [only] = done.stderr.splitlines()
    assert only.startswith(f"xceprov: {tmp_path / 'xceprov.yaml'}: ")
    assert line in done.stderr and "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()
