"""Reading a provider's catalogue through its catalogue root: kept for ``catalogue_ttl``, read
again past it, on ``refresh`` or when the settings change; a bad output or a failed read never
replaces the kept catalogue (a fake engine stands in for Terraform: the real run is
tests/integration/test_offerings_cli.py)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import TerraformError
from orchestrator.model.config import Config
from orchestrator.ops.catalogue import CACHE_FILE, RETRY_AFTER, VARS_FILE, CatalogueReader, catalogue_dir
from orchestrator.paths import toolkit_root
from tests.catalogue_fake import FLAVOR
from tests.catalogue_fake import CatalogueEngine as FakeEngine

SITE = """
cluster: demo
state_dir: {state}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim, catalogue_ttl: 10m, settings: {{max_retries: {retries}}}}}
templates:
  cpu:
    xce: {{slots: 4}}
    providers:
      sim: {{image: debian-12, select: {{cpus: {{min: 4}}}}}}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _config(tmp_path: Path, retries: int = 0) -> Config:
    text = SITE.format(state=tmp_path / "state", retries=retries)
    return parse_config(text, "site.yaml", tmp_path).config


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _reader(config: Config, engine: FakeEngine, clock: Clock) -> CatalogueReader:
    return CatalogueReader(config, toolkit_root(), lambda: engine, clock)  # type: ignore[arg-type,return-value]


def test_kept_for_the_ttl_then_read_again(tmp_path: Path, clock: Clock) -> None:
    engine = FakeEngine()
    config = _config(tmp_path)
    first = _reader(config, engine, clock).catalogue("sim")
    assert [f.name for f in first.flavors] == ["c8"] and first.read_at == clock.now
    assert engine.calls == ["init", "apply"]
    cache = catalogue_dir(config, "sim") / CACHE_FILE
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    # Private: the directory holds the provider's settings (and Terraform's state of the root).
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((cache.parent / VARS_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((cache.parent / "main.tf").stat().st_mode) == 0o600
    engine.flavors = [FLAVOR, {**FLAVOR, "name": "c16", "cpus": 16}]
    clock.now += 599
    # Another reader (another pass, another process): the file is what is kept.
    assert [f.name for f in _reader(config, engine, clock).catalogue("sim").flavors] == ["c8"]
    assert engine.calls == ["init", "apply"]
    clock.now += 1
    assert [f.name for f in _reader(config, engine, clock).catalogue("sim").flavors] == ["c8", "c16"]
    # Initialised once: the root did not change.
    assert engine.calls == ["init", "apply", "apply"]


def test_refresh_and_changed_settings_read_again(tmp_path: Path, clock: Clock) -> None:
    engine = FakeEngine()
    _reader(_config(tmp_path), engine, clock).catalogue("sim")
    _reader(_config(tmp_path), engine, clock).catalogue("sim", refresh=True)
    assert engine.calls.count("apply") == 2
    _reader(_config(tmp_path, retries=3), engine, clock).catalogue("sim")
    assert engine.calls.count("apply") == 3


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ({"c8": FLAVOR}, "flavors: expected a list, got dict"),
        ([{**FLAVOR, "memory_gb": "lots"}], "flavors[0] (c8).memory_gb: expected a number, got str"),
    ],
)
def test_a_bad_output_is_one_line_and_the_kept_catalogue_stays(
    tmp_path: Path, clock: Clock, output: Any, says: str
) -> None:
    engine = FakeEngine()
    config = _config(tmp_path)
    _reader(config, engine, clock).catalogue("sim")
    before = (catalogue_dir(config, "sim") / CACHE_FILE).read_bytes()
    engine.flavors = output
    with pytest.raises(TerraformError) as caught:
        _reader(config, engine, clock).catalogue("sim", refresh=True)
    text = str(caught.value)
    assert text.startswith("terraform/catalogue/xcesim (provider sim): the catalogue could not be read: ")
    assert says in text and "\n" not in text
    assert (catalogue_dir(config, "sim") / CACHE_FILE).read_bytes() == before


def test_selections_use_a_stale_catalogue_when_a_read_fails_and_wait_before_trying_again(
    tmp_path: Path, clock: Clock
) -> None:
    engine = FakeEngine()
    config = _config(tmp_path)
    reader = _reader(config, engine, clock)
    assert [o.name for o in reader.selections().selected[("cpu", "sim")]] == ["c8"]
    clock.now += 3600
    engine.fail = "Error: store unreachable"
    found = reader.selections()
    assert [o.name for o in found.selected[("cpu", "sim")]] == ["c8"] and not found.problems
    applies = engine.calls.count("apply")
    clock.now += RETRY_AFTER - 1
    reader.selections()
    assert engine.calls.count("apply") == applies  # no Terraform run each pass while it fails
    clock.now += 1
    engine.fail = None
    reader.selections()
    assert engine.calls.count("apply") == applies + 1


def test_selections_without_any_catalogue_say_why(tmp_path: Path, clock: Clock) -> None:
    engine = FakeEngine()
    engine.fail = "Error: store unreachable"
    found = _reader(_config(tmp_path), engine, clock).selections()
    assert found.selected == {("cpu", "sim"): []}
    assert found.problems[("cpu", "sim")].startswith("the catalogue of provider sim is unavailable: ")
    assert "store unreachable" in found.problems[("cpu", "sim")]


def test_a_stale_catalogue_of_other_settings_is_not_used(tmp_path: Path, clock: Clock) -> None:
    engine = FakeEngine()
    _reader(_config(tmp_path), engine, clock).selections()
    engine.fail = "Error: no such region"
    found = _reader(_config(tmp_path, retries=2), engine, clock).selections()
    assert found.selected == {("cpu", "sim"): []} and "no such region" in found.problems[("cpu", "sim")]
