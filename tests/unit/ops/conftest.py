"""Fixtures of the executor tests: a site configuration on the real toolkit root and a fake engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig

# --import-mode=importlib: the fake engine lives in tests/, beside the other shared helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import FakeEngine, site_config


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedConfig:
    return site_config(tmp_path)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()
