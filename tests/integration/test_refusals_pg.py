"""The memory of refusals shared by two orchestrators over PostgreSQL (``terraform.backend: pg``).

Two site directories of one cluster, each with a state directory of its own, over one throw-away
server (tests/pg_server.py, a fresh database per test): what one orchestrator's cloud refused,
the other holds too, and neither undoes the other's records; nothing of it is in a local file.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestrator.configfile import load_config
from orchestrator.reconcile.refusals import REFUSALS_FILE, RefusalMemory
from orchestrator.workspace.sharedstore import cluster_documents
from tests.pg_server import standalone_site

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0


def memory(tmp_path: Path, name: str, seed: int) -> tuple[RefusalMemory, Path]:
    site = tmp_path / name
    site.mkdir()
    (site / "xceprov.yaml").write_text(standalone_site("shared"))
    config = load_config(str(site / "xceprov.yaml")).config
    return RefusalMemory.load(cluster_documents(config), config.policy, random.Random(seed)), config.state_dir


def test_two_orchestrators_share_one_memory_of_refusals(tmp_path: Path, conn_str: str) -> None:
    one, one_state = memory(tmp_path, "one", 1)
    two, two_state = memory(tmp_path, "two", 2)
    held = one.refused("sim", "c8.large", "capacity", "InsufficientCapacity: no c8.large", NOW)
    two.refused("sim", "", "quota", "InstanceLimitExceeded", NOW)  # over the row, not its old copy
    two.refresh()
    assert two.capacity("sim", "c8.large", NOW) == held.until  # one's refusal holds two's creates
    one.refresh()
    assert [(r.scope, r.placement) for r in one.records(NOW)] == [("capacity", "c8.large"), ("quota", "")]
    two.succeeded("sim", "c8.large")  # two's create went through: the offering has room for both
    one.refresh()
    assert one.capacity("sim", "c8.large", NOW) is None and one.quota("sim", NOW) is not None
    assert not (one_state / REFUSALS_FILE).exists() and not (two_state / REFUSALS_FILE).exists()
