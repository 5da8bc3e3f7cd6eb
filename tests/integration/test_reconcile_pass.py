"""The reconcile pass against the real simulated world (controller process, cloud behind Terraform).

Each test drives ``Reconciler.run_once`` pass by pass on a clock it moves, injects the fault of
the issue's list ("Faults that must be tested") from outside (the simulated cloud's fault
controls, the controller's admin socket), and ends with the cloud and the facts in exact
agreement: no open op, no duplicate, no leak.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reconcile_world import agree, reconcile_world

from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration


def test_steady_demand_creates_exactly_the_missing_hosts(tmp_path: Path) -> None:
    with reconcile_world(tmp_path) as world:
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        reports = world.passes(6)
        assert len(agree(world)) == 3
        created = [op for r in reports for op in r.ops]
        assert len(created) == 1, [r.to_json() for r in reports]
        assert reports[0].gaps["cpu"]["gap"] == 3
        assert all(r.ok for r in reports), [p for r in reports for p in r.phases if not p.ok]
        assert reports[-1].gaps["cpu"]["gap"] == 0
