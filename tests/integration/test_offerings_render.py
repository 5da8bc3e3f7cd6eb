"""Instances are launched on their offerings through the real Terraform and the simulated cloud:
the zone and subnet an op placed each key on are where the cloud has it, and its tag says which."""

from __future__ import annotations

from pathlib import Path

from reconcile_world import reconcile_world

from orchestrator.model import tags as owner
from orchestrator.model.offerings import Placement

WIDE = {
    "wide": {
        "providers": {
            "sim": {
                "image": "debian-12",
                "cost_per_hour": 0.5,
                "offerings": [
                    {"flavor": "c8.large"},
                    {"flavor": "c16.large", "zone": "zone-b", "subnet": "net-2", "cost_per_hour": 0.8},
                ],
            }
        }
    }
}


def test_each_instance_is_created_in_its_offerings_zone_and_subnet(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, templates=WIDE) as world:
        placements = [Placement("c16.large@zone-b@net-2", 1), Placement("c8.large", 1)]
        made = world.executor.create("sim", "wide", 2, placements=placements).created
        assert len(made) == 2
        held = {i.client_token: i for i in world.store.list_instances({owner.CLUSTER: world.cluster})}
        shown = sorted((i.flavor, i.zone, i.subnet, i.tags[owner.OFFERING]) for i in held.values())
        assert shown == [("c16.large", "zone-b", "net-2", "c16.large@zone-b@net-2"), ("c8.large", "", "", "c8.large")]
