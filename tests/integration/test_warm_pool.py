"""The warm pool in the simulated world: the reconcile pass, the cloud behind Terraform, the controller.

A pool of 2 is filled (instances stopped in the cloud, tagged ``xce:pool=warm``, no join
deadline); a demand of 3 starts both from the pool (same instances, same ids) and creates one,
all three join, and the pool is refilled to 2 in the same pass, after the create. The orphan
scan finds nothing in a stopped pool but reports a pool-tagged stray with no fact as usual, and
``destroy --all`` removes the pool with the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from reconcile_world import ROOT, World, agree, reconcile_world

from orchestrator.configfile import load_config
from orchestrator.model import tags as owner
from orchestrator.ops.executor import Created
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.reconcile.results import ScaleOutResult
from orchestrator.services.destroy import destroy
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

POOLED = {
    "cpu": {
        "providers": {
            "sim": {
                "flavor": "c8.large",
                "image": "debian-12",
                "cost_per_hour": 1.0,
                "stopped_cost_per_hour": 0.1,
                "warm_pool": 2,
            }
        }
    }
}


def pool_in_cloud(world: World) -> dict[str, str]:
    """Instance key → cloud state of the instances tagged as waiting in the pool."""
    return {k: i.state for k, i in world.alive().items() if i.tags.get(owner.POOL) == "warm"}


def test_demand_starts_the_pool_first_creates_the_rest_and_the_pool_is_refilled(tmp_path: Path) -> None:
    holder: list[World] = []

    def join_them(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        for c in created:  # what the push play ends with: the host's worker joins
            holder[0].join(c)
        return {c.name: "ok" for c in created}

    policy = {"cooldown": 0, "orphans": {"settle_window": 0}}
    with reconcile_world(tmp_path, templates=POOLED, bootstrap=join_them, policy=policy) as world:
        holder.append(world)
        world.wait_demand(lambda wanted: True)
        [fill] = world.passes(1)
        assert [op.count for op in fill.result("scale-out", ScaleOutResult).pooled] == [2]
        first_pool = pool_in_cloud(world)
        assert sorted(first_pool.values()) == ["stopped", "stopped"]
        ids = {k: world.alive()[k].id for k in first_pool}

        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        [burst] = world.passes(1)
        out = burst.result("scale-out", ScaleOutResult)
        assert [op.count for op in out.started] == [2]
        assert [op.count for op in out.created] == [1]
        assert [op.count for op in out.pooled] == [2]
        alive = agree(world)
        # The pool's two run now under the ids they had; one was created; two new wait stopped.
        assert {k: (alive[k].id, alive[k].state, owner.POOL in alive[k].tags) for k in ids} == {
            k: (i, "running", False) for k, i in ids.items()
        }
        refilled = pool_in_cloud(world)
        assert len(alive) == 5 and sorted(refilled.values()) == ["stopped", "stopped"]
        assert not set(refilled) & set(ids)
        joined = {h.instance_key for h in world.link.host_status(provider="sim") if h.joined_at > 0}
        assert joined == set(alive) - set(refilled)
        order = [e["action"] for e in world.audit()]
        take = order.index("reconcile-pool-take")
        refill = order.index("reconcile-pool-refill", take)
        assert take < order.index("op-start") < order.index("op-created", take) < refill

        config = world.ops.parts.config
        scanner = OrphanScanner(config, world.ops, LinkController(world.link), world.clock, config.state_dir)
        assert scanner.scan(act=False).findings == []
        stray_tags = {
            owner.CLUSTER: world.cluster,
            owner.PROVIDER: "sim",
            owner.OP_ID: "op-00000001-000000000000",
            owner.EPOCH: "1.1",
            owner.TEMPLATE: "cpu",
            owner.POOL: "warm",
        }
        stray = world.store.create_instance("stray", "c8.large", "debian-12", stray_tags, "", "stray-000")
        world.store.stop(stray.id)
        [finding] = scanner.scan(act=False).findings
        assert (finding.cls, finding.object_id, finding.action) == ("b", stray.id, "report")
        world.store.delete(stray.id)

        loaded = load_config(str(world.site / "xceprov.yaml"))
        destroy(loaded, ROOT, all_instances=True, wired=world.ops, force=True)  # the hosts run work
        assert agree(world) == {}
