"""The configuration of catalogue selection: ``select:`` only where the module has a catalogue,
and ``providers.<name>.catalogue_ttl``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import modules

SITE = """
cluster: site1
controller: {{ca: system}}
providers:
  sim: {{module: {module}{extra}}}
templates:
  cpu:
    providers:
      sim: {{image: debian-12, select: {{cpus: {{min: 2}}}}}}
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.yaml", Path("/srv/site"))
    return info.value.problems


def test_every_shipped_module_has_a_catalogue_root() -> None:
    root = Path(__file__).resolve().parents[3] / "terraform" / "catalogue"
    for name, entry in modules.MODULES.items():
        assert entry.catalogue, name
        assert (root / name / "main.tf").is_file(), name


def test_select_on_a_module_without_catalogue_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = dataclasses.replace(modules.MODULES["xcesim"], name="bare", catalogue=False)
    monkeypatch.setitem(modules.MODULES, "bare", bare)
    [line] = _problems(SITE.format(module="bare", extra=""))
    assert line.startswith("site.yaml: templates.cpu.providers.sim.select: module 'bare' has no flavor catalogue")
    assert "\n" not in line
    # The same selection on a module with a catalogue loads.
    loaded = parse_config(SITE.format(module="xcesim", extra=""), "site.yaml", Path("/srv/site"))
    assert loaded.config.providers["sim"].catalogue_ttl == 3600.0


def test_catalogue_ttl_takes_a_duration_above_zero() -> None:
    loaded = parse_config(SITE.format(module="xcesim", extra=", catalogue_ttl: 10m"), "site.yaml", Path("/srv/site"))
    assert loaded.config.providers["sim"].catalogue_ttl == 600.0
    [line] = _problems(SITE.format(module="xcesim", extra=", catalogue_ttl: 0s"))
    assert line.startswith("site.yaml: providers.sim.catalogue_ttl:")
