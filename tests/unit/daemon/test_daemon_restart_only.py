"""The keys a reload cannot change in a running daemon: kept, said once each, and documented."""

from __future__ import annotations

from pathlib import Path

from orchestrator.configfile import parse_config
from orchestrator.daemon.restartonly import RESTART_ONLY, keep_restart_only, log_lines
from orchestrator.model.config import Config

DOCS = Path(__file__).resolve().parents[3] / "docs"

TWO = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim, priority: 1}
  spot: {module: xcesim, priority: 2}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12}
      spot: {flavor: c8.large, image: debian-12}
"""

# spot removed, aws added (with a template of its own and an entry in cpu), sim's priority changed.
OTHER = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim, priority: 7}
  aws: {module: xcesim}
templates:
  cpu:
    providers:
      sim: {flavor: c8.xlarge, image: debian-12}
      aws: {flavor: m5.large, image: debian-12}
  gpu:
    providers:
      aws: {flavor: g5.large, image: debian-12}
"""


def config(text: str) -> Config:
    return parse_config(text, "site.yaml", Path("/srv/site")).config


def test_the_set_of_providers_is_kept_and_their_settings_reload() -> None:
    old, new = config(TWO), config(OTHER)
    effective, kept = keep_restart_only(old, new)
    assert sorted(effective.providers) == ["sim", "spot"]
    assert effective.providers["sim"].priority == 7  # a provider in both: its new settings
    assert effective.providers["spot"] == old.providers["spot"]  # removed: still served as it was
    assert sorted(effective.templates) == ["cpu"]  # gpu names only aws, which is not served
    cpu = effective.templates["cpu"].providers
    assert sorted(cpu) == ["sim", "spot"] and cpu["sim"].flavor == "c8.xlarge"
    assert cpu["spot"] == old.templates["cpu"].providers["spot"]
    # What is in force is a configuration the model itself accepts.
    assert Config.model_validate(effective.model_dump()) == effective
    assert log_lines(kept, new, "site.yaml") == [
        "SIGHUP: the set of providers changed in site.yaml (added aws: not served; removed spot: still "
        "served): it takes effect at the next start; the daemon keeps serving sim, spot"
    ]


def test_nothing_restart_only_changed_is_the_new_configuration_itself() -> None:
    old, new = config(TWO), config(TWO.replace("priority: 2", "priority: 5"))
    effective, kept = keep_restart_only(old, new)
    assert effective is new and kept == []


def test_every_restart_only_key_is_documented_as_such() -> None:
    daemon_md = (DOCS / "daemon.md").read_text()
    configuration_md = (DOCS / "configuration.md").read_text()
    for key, _section, _name in RESTART_ONLY:
        named = f"`{key}`" if key not in ("controller", "daemon.metrics") else f"`{key}.*`"
        assert named in daemon_md.split("| `SIGHUP`", 1)[1].split("\n", 1)[0], (key, "docs/daemon.md")
        assert named in configuration_md.split("## Reload", 1)[1], (key, "docs/configuration.md")
