"""A create op's placements are named in its intent's detail (what the ledger and a resume read)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tffake import FakeEngine, MemoryFacts, site_config, unit_executor

from orchestrator.errors import UsageError
from orchestrator.model.facts import FactKind
from orchestrator.model.offerings import Placement, placements_of
from orchestrator.model.pool import FILL_DETAIL


def test_the_intent_names_the_placements_and_a_pool_fill_keeps_its_own_detail(tmp_path: Path) -> None:
    loaded, facts = site_config(tmp_path), MemoryFacts()
    executor = unit_executor(loaded, FakeEngine(), facts=facts)
    executor.create("sim", "cpu", 2, placements=[Placement("c8.large", 2)])
    executor.create("sim", "cpu", 1, pool=True)
    executor.create("sim", "cpu", 1)
    details = [f.detail for f in facts.committed if f.kind == FactKind.REQUEST_INTENT]
    assert placements_of(details[0]) == [Placement("c8.large", 2)]
    assert details[1:] == [FILL_DETAIL, ""]
    with pytest.raises(UsageError, match=r"placements c8\.large=1 place 1 instances, not 2"):
        executor.create("sim", "cpu", 2, placements=[Placement("c8.large", 1)])
