"""The daemon launches a ``select:`` template on the cheapest offering its provider's flavor
catalogue gives (the catalogue read through the real Terraform engine, the policy and the
executor given the same selection)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sim_world_helpers import SimWorld, sim_world, wait_until

import tests.integration.test_daemon as daemon_tests

pytestmark = pytest.mark.integration


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    with sim_world(tmp_path / "site", f"dsel-{secrets.token_hex(3)}") as w:
        yield w


def test_a_demand_for_a_select_template_launches_on_its_cheapest_offering(world: SimWorld) -> None:
    cfg = daemon_tests.configure(world)
    cpu = cfg["templates"]["cpu"]
    side = cpu["providers"]["sim"]
    side.pop("flavor", None)
    side["select"] = {"cpus": {"min": 8, "max": 8}, "gpus": {"max": 0}, "zones": ["b"]}
    cpu["providers"] = {"sim": side}
    (world.site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
    with daemon_tests.running_daemon(world, "daemon") as daemon:
        daemon.wait_status("the daemon's lease of sim", daemon_tests.leased)
        world.ok("sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "600s")
        wait_until("the daemon's two hosts in the cloud", lambda: len(world.alive()) == 2, timeout=90)
        # c8.large.spot (0.11) is the cheapest 8-cpu flavor offered in zone b.
        assert sorted((i.flavor, i.zone, i.tags["xce:offering"]) for i in world.alive().values()) == [
            ("c8.large.spot", "b", "c8.large.spot@b"),
            ("c8.large.spot", "b", "c8.large.spot@b"),
        ]
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()
