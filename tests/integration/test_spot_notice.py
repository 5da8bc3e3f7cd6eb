"""Issue 31, deliverable 4 end to end: a spot notice acted on by the daemon in a simulated world.

``xceprov sim up`` (the controller; no simulated hosts: the expected hosts never join, which is
enough for the notice's path), ``xceprov daemon`` with ``notice_interval: 1s``, two hosts asked
for. Then ``xceprov sim fault spot-notice ID --lead 25s``: the daemon tells the controller (the
host gets its reclaim time, is closed), the status names the noticed host, a replacement instance
is created before the reclaim, and at the reclaim the loss is recorded once, reason
``spot-reclaim`` (the cloud reclaims on its own schedule; the daemon's notice poll is what reads
the cloud in this world).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_world_helpers import SimWorld, sim_world, wait_until

from orchestrator.model.facts import FactKind
from tests.integration.test_daemon import configure, running_daemon

pytestmark = pytest.mark.integration

LEAD = 25.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    with sim_world(tmp_path / "site", f"spot-{secrets.token_hex(3)}") as w:
        yield w


def test_a_spot_notice_closes_the_host_a_replacement_comes_before_the_reclaim_and_the_loss_is_recorded_once(
    world: SimWorld,
) -> None:
    configure(world, notice_interval="1s")
    with running_daemon(world, "daemon") as daemon:
        world.ok_once_leased("sim", "submit", "--template", "cpu", "--hosts", "2", "--duration", "600s")
        wait_until("two hosts expected", lambda: len(world.hosts()) == 2 and len(world.alive()) == 2, timeout=120)
        key, inst = sorted(world.alive().items())[0]
        out = world.ok("sim", "fault", "spot-notice", inst.id, "--lead", f"{LEAD:g}s")
        assert inst.id in out
        doc = daemon.wait_status(
            "the noticed host in the status", lambda d: [n["instance_id"] for n in d.get("notices", [])] == [inst.id]
        )
        [row] = doc["notices"]
        assert row["instance_key"] == key and row["host_state"] in ("closed", "expected") and row["lost_at"] is None
        assert row["closed_seconds"] <= 10.0
        assert world.hosts()[key].reclaim_at == pytest.approx(row["reclaim_at"], abs=1.0)
        shown = json.loads(world.ok("status", "--json"))
        assert [n["instance_id"] for n in shown["daemon"]["notices"]] == [inst.id]
        # The replacement: a third instance, created before the reclaim.
        wait_until("a replacement", lambda: len(world.alive()) == 3, timeout=LEAD - 5)
        assert inst.id in {i.id for i in world.alive().values()}  # not reclaimed yet
        # The reclaim, and its loss recorded once.

        def lost() -> list[str]:
            return [f.instance_key for f in world.facts() if f.kind == FactKind.LOST]

        wait_until("the loss recorded", lambda: lost() == [key], timeout=LEAD + 60)
        daemon.wait_status("the loss in the status", lambda d: d["notices"][0]["lost_at"] is not None)
    [fact] = [f for f in world.facts() if f.kind == FactKind.LOST]
    assert json.loads(fact.detail)["reason"] == "spot-reclaim"
    assert world.store.get(inst.id).state_reason == "spot-reclaim"  # type: ignore[union-attr]
    assert [a["instance_id"] for a in world.audit() if a["action"] == "interruption-notice"] == [inst.id]
