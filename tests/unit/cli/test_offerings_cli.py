"""``xceprov offerings`` on templates without ``select:``: providers by priority, offerings in the
policy's order, and no catalogue read (no Terraform run, nothing written under state_dir)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import cli

SITE = """
cluster: demo
state_dir: {state}
controller: {{ca: system}}
providers:
  low: {{module: xcesim, priority: 1}}
  high: {{module: xcesim, priority: 50}}
templates:
  cpu:
    xce: {{slots: 4}}
    providers:
      low: {{flavor: c4, image: debian-12, cost_per_hour: 0.2}}
      high:
        image: debian-12
        cost_per_hour: 0.4
        offerings:
          - {{flavor: c8, zone: a}}
          - {{flavor: c16, slots: 16, cost_per_hour: 0.64}}
          - {{flavor: c4, zone: b, cost_per_hour: 0.1, name: cheap}}
"""


def _run(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_listed_offerings_in_the_policys_order_without_reading_a_catalogue(tmp_path: Path) -> None:
    config = tmp_path / "xceprov.yaml"
    config.write_text(SITE.format(state=tmp_path / "state"))
    code, out, _ = _run(config, "offerings", "--json")
    assert code == 0
    [cpu] = json.loads(out)["templates"]
    assert [(p["provider"], p["way"], p["catalogue"]) for p in cpu["providers"]] == [
        ("high", "offerings", None),
        ("low", "flavor", None),
    ]
    high = cpu["providers"][0]["offerings"]
    # Cost per slot: cheap 0.025, c16 0.04, c8@a 0.1 (the template's price, the template's slots).
    assert [(o["order"], o["offering"], o["cost_per_slot"], o["source"]) for o in high] == [
        (1, "cheap", 0.025, "listed"),
        (2, "c16", 0.04, "listed"),
        (3, "c8@a", 0.1, "listed"),
    ]
    assert not (tmp_path / "state" / "catalogue").exists()
    code, out, _ = _run(config, "offerings", "cpu")
    assert code == 0
    assert out.splitlines()[:2] == ["cpu:", "  high (module xcesim, priority 50, offerings)"]
    assert out.splitlines()[2].split() == ["1.", "cheap", "0.1000/h", "4", "slots", "0.0250/slot", "listed"]
