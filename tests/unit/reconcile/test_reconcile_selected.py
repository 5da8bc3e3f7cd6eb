"""The daemon's per-pass view of the ``select:`` offerings: nothing read without a select, the
catalogue read through the reader, a problem logged once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.ops.catalogue import CatalogueReader
from orchestrator.paths import toolkit_root
from orchestrator.reconcile.selected import SelectedOfferings
from tests.catalogue_fake import CatalogueEngine as Engine

SITE = """
cluster: demo
state_dir: {state}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim}}
templates:
  cpu:
    providers:
      sim: {{image: debian-12, {way}}}
"""


def _selected(tmp_path: Path, way: str, engine: Engine) -> SelectedOfferings:
    config = parse_config(SITE.format(state=tmp_path / "state", way=way), "site.yaml", tmp_path).config
    return SelectedOfferings(CatalogueReader(config, toolkit_root(), lambda: engine))  # type: ignore[arg-type,return-value]


def test_without_select_nothing_is_read(tmp_path: Path) -> None:
    engine = Engine()
    assert _selected(tmp_path, "flavor: c8", engine).current() == {}
    assert engine.calls == [] and not (tmp_path / "state" / "catalogue").exists()


def test_select_offerings_and_a_problem_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine()
    engine.fail = "Error: the cloud is away"
    selected = _selected(tmp_path, "select: {cpus: {min: 4}}", engine)
    with caplog.at_level(logging.WARNING, logger="orchestrator.reconcile.selected"):
        assert selected.current() == {("cpu", "sim"): []}
        assert selected.current() == {("cpu", "sim"): []}
    [record] = caplog.records
    assert "template cpu on provider sim has no offering from the catalogue" in record.getMessage()
    assert "the cloud is away" in selected.problems[("cpu", "sim")]
    engine.fail = None
    selected.reader.clock = lambda: 1e12  # past the wait after a failed read
    assert [o.name for o in selected.current()[("cpu", "sim")]] == ["c8"]
    assert [o.name for o in selected.last[("cpu", "sim")]] == ["c8"]  # what the status prices with
    assert selected.problems == {}


def test_a_reload_selects_by_the_new_configuration(tmp_path: Path) -> None:
    engine = Engine()
    selected = _selected(tmp_path, "flavor: c8", engine)
    assert selected.current() == {}
    text = SITE.format(state=tmp_path / "state", way="select: {cpus: {min: 4}}")
    selected.reload(parse_config(text, "site.yaml", tmp_path).config)
    assert [o.name for o in selected.current()[("cpu", "sim")]] == ["c8"]
