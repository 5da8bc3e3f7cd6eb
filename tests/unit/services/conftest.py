"""Fixtures of the verb tests: a site configuration on the real toolkit root and a fake engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig

# --import-mode=importlib: the fake engine lives in tests/, beside the other shared helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import ROOT, FakeEngine, site_config


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedConfig:
    return site_config(tmp_path)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def toolkit(tmp_path: Path) -> Path:
    """The real Terraform modules and templates, without playbooks (their syntax is tested elsewhere)."""
    root = tmp_path / "toolkit"
    (root / "ansible" / "playbooks").mkdir(parents=True)
    for part in ("terraform", "templates"):
        (root / part).symlink_to(ROOT / part)
    return root
