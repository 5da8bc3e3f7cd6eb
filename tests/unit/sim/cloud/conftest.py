"""Fixtures of the simulated cloud's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim_cloud_cli import write_sim_site


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A site of the shipped defaults, its state and simulated world under ``tmp_path``."""
    return write_sim_site(tmp_path)
