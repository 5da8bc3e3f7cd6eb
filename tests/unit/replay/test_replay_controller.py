"""The replay's model controller: the controller as the pass and the executor see it, on the virtual clock.

What the pass and the executor rely on: facts idempotent per kind, op and key, numbered in order
and stamped with the clock; an expected host that joins after its instance's launch plus the
drawn join latency (not when its instance is gone), then takes work first in first out and is
idle again when it ends; hostClose and hostDecommission answering as the simulated controller
does; a loss that ends an instance, requeues its work and makes its host lost; a returned fact
that removes the host; and the facts of long-gone ops leaving what the pass reads (not the figures).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostEvent, HostInfo
from orchestrator.errors import FinalError
from orchestrator.model.facts import FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.pool import start_detail
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import ModelCloud
from orchestrator.replay.controller import COMMIT_TIME, LOST_AFTER, ModelController
from orchestrator.replay.hostcontrol import REPLAY_EPOCH, ReplayHosts
from orchestrator.replay.model import Job, Latencies, Loss

START = 1_767_225_600.0
JOIN = 20.0
OP = "op-00000001-aaaaaaaaaaaa"


class World:
    """A model controller over a model cloud, with what it told the daemon."""

    def __init__(self, keep_gone: float | None = 3600.0) -> None:
        self.clock = VirtualClock(START)
        self.cloud = ModelCloud()
        self.ctl = ModelController(
            self.clock, self.cloud, Latencies(join=(JOIN,)), random.Random(1), keep_gone=keep_gone
        )
        self.events: list[HostEvent] = []
        self.pushed: list[DemandSnapshot] = []
        self.committed: list[Fact] = []
        self.ctl.on_host_event = self.events.append
        self.ctl.on_demand = self.pushed.append
        self.ctl.on_facts = self.committed.extend

    def fact(self, kind: FactKind, key: str = "", op: str = OP, **values: Any) -> Fact:
        return Fact(kind, "sim", op, REPLAY_EPOCH, instance_key=key, template="cpu", **values)

    def launch(self, count: int = 1, op: str = OP) -> list[str]:
        """An op's intent, its instances made in the cloud now, their created and expected facts."""
        self.ctl.commit(self.fact(FactKind.REQUEST_INTENT, op=op, count=count))
        keys = [instance_key(op, i) for i in range(count)]
        for key in keys:
            inst = self.cloud.create(key, "sim", f"h-{key}", {"xce:template": "cpu"}, "c8.large", self.clock.now)
            common = {"instance_id": inst.instance_id, "host_name": f"h-{key}"}
            self.ctl.commit_many(
                [
                    self.fact(FactKind.INSTANCE_CREATED, key, op=op, **common),
                    self.fact(FactKind.EXPECTED_HOST, key, op=op, join_deadline=self.clock.now + 900, **common),
                ]
            )
        return keys

    def at(self, seconds: float) -> None:
        """The clock ``seconds`` after the start, the model caught up."""
        self.clock.to(START + seconds)
        self.ctl.catch_up()

    def state(self, key: str) -> str:
        return next(h.state for h in self.ctl.hosts() if h.instance_key == key)

    def info(self, key: str) -> HostInfo:
        return next(h for h in self.ctl.hosts() if h.instance_key == key)

    def demand(self) -> dict[str, tuple[int, int, int, int]]:
        snapshot = self.ctl.demand()
        assert snapshot is not None
        return {t.template: (t.wanted, t.pending_hosts, t.in_flight, t.busy) for t in snapshot.templates}


def test_facts_are_idempotent_numbered_and_stamped_with_the_clock() -> None:
    world = World()
    intent = world.fact(FactKind.REQUEST_INTENT, count=1)
    world.ctl.commit(intent)
    world.clock.advance(5)
    world.ctl.commit_many([intent, world.fact(FactKind.INSTANCE_CREATED, instance_key(OP, 0))])
    facts = world.ctl.facts("sim")
    assert [f.kind for f in facts] == [FactKind.REQUEST_INTENT, FactKind.INSTANCE_CREATED]
    assert [f.fact_id for f in facts] == [1, 2]
    assert facts[0].committed == pytest.approx(START + COMMIT_TIME)
    assert facts[1].committed == pytest.approx(START + 5 + 2 * COMMIT_TIME)
    assert world.committed == facts  # the observer hears of new facts only
    assert world.ctl.facts("other") == []


def test_an_expected_host_joins_after_its_launch_plus_the_join_latency_and_takes_work() -> None:
    world = World()
    (key,) = world.launch()
    assert world.state(key) == "expected"
    assert world.demand()["cpu"][2] == 1  # in flight
    world.at(JOIN - 1)
    assert world.state(key) == "expected"
    world.ctl.at(START + JOIN + 10, lambda now: world.ctl.submit(Job(now, "cpu", 1, 100.0), now))
    world.at(JOIN + 1)
    assert world.state(key) == "idle"
    assert world.info(key).idle_since == pytest.approx(START + JOIN, abs=0.01)
    assert [e.kind for e in world.events] == ["joined", "idleSince"]
    world.at(JOIN + 10)
    assert world.state(key) == "busy"
    assert world.demand()["cpu"] == (0, 0, 0, 1)
    world.at(JOIN + 111)
    assert world.state(key) == "idle"
    assert world.info(key).idle_since == pytest.approx(START + JOIN + 110, abs=0.01)


def test_pending_work_is_demand_and_its_pending_host_seconds_are_counted() -> None:
    world = World()
    world.ctl.at(START + 10, lambda now: world.ctl.submit(Job(now, "cpu", 3, 60.0), now))
    world.at(70)
    assert world.demand()["cpu"][:2] == (3, 3)
    assert world.ctl.pending_seconds["cpu"] == pytest.approx(3 * 60)
    assert world.pushed[-1].time == START + 10  # pushed when it changed


def test_a_host_whose_instance_is_gone_never_joins_and_is_overdue_after_its_deadline() -> None:
    world = World()
    (key,) = world.launch()
    world.cloud.end(key, START + 1)
    world.at(901)
    assert world.state(key) == "overdue"
    assert world.demand()["cpu"][2] == 0  # not in flight any more


def test_close_answers_closed_or_closing_and_decommission_of_a_busy_host_is_refused_unless_forced() -> None:
    world = World()
    idle, busy = world.launch(2)
    world.at(JOIN + 1)
    world.ctl.submit(Job(world.clock.now, "cpu", 1, 100.0), world.clock.now)
    hosts = ReplayHosts(world.ctl)
    by_key = {h.instance_key: h for h in hosts.hosts("sim")}
    assert {by_key[idle].state, by_key[busy].state} == {"idle", "busy"}
    if by_key[idle].state == "busy":
        idle, busy = busy, idle
    with pytest.raises(FinalError, match="running work"):
        hosts.decommission("sim", REPLAY_EPOCH, by_key[busy], "returned")
    assert hosts.close("sim", REPLAY_EPOCH, by_key[idle], "drain") == "closed"
    assert hosts.close("sim", REPLAY_EPOCH, by_key[busy], "drain") == "closing"
    assert world.state(busy) == "closing"
    world.at(JOIN + 102)
    assert world.state(busy) == "closed"  # its work ended: drained, never offered for work again
    hosts.decommission("sim", REPLAY_EPOCH, world.info(busy), "returned")
    assert world.state(busy) == "decommissioned"
    with pytest.raises(FinalError, match="no host"):
        hosts.close("other", REPLAY_EPOCH, world.info(idle), "drain")


def test_a_forced_decommission_takes_a_busy_host_out_of_its_work() -> None:
    world = World()
    (key,) = world.launch()
    world.at(JOIN + 1)
    world.ctl.submit(Job(world.clock.now, "cpu", 1, 100.0), world.clock.now)
    ReplayHosts(world.ctl).decommission("sim", REPLAY_EPOCH, world.info(key), "returned", force=True)
    assert world.state(key) == "decommissioned"
    assert world.ctl.works[0].host_ids == []


def lose(world: World, at: float) -> None:
    def take(now: float) -> None:
        world.ctl.lose(Loss(now, "sim", "cpu"), now)

    world.ctl.at(START + at, take)


def test_a_loss_takes_a_busy_instance_before_an_older_idle_one() -> None:
    world = World()
    (old,) = world.launch(op="op-00000001-000000000001")
    world.clock.advance(5)
    (young,) = world.launch(op="op-00000002-000000000002")
    world.at(JOIN + 10)
    ReplayHosts(world.ctl).close("sim", REPLAY_EPOCH, world.info(old), "drain")  # the work goes to the young one
    world.ctl.submit(Job(world.clock.now, "cpu", 1, 1000.0), world.clock.now)
    assert world.state(young) == "busy"
    lose(world, 100)
    world.at(100)
    assert world.cloud.instances[young].reason == "spot-reclaim"
    assert world.cloud.instances[young].ended == START + 100
    assert world.cloud.instances[old].live
    assert world.state(young) == "disconnected"
    assert world.demand()["cpu"][1] == 1  # its work waits for a host again
    world.at(100 + LOST_AFTER)
    assert world.state(young) == "lost"
    assert "lost" in [e.kind for e in world.events if e.host.instance_key == young]


def test_a_loss_among_idle_instances_takes_the_oldest() -> None:
    world = World()
    old, young = world.launch(2)
    world.at(JOIN + 1)
    lose(world, 100)
    world.at(100)
    assert not world.cloud.instances[old].live and world.cloud.instances[young].live


def test_a_loss_with_no_live_instance_takes_nothing() -> None:
    world = World()
    assert world.ctl.lose(Loss(START, "sim", "cpu"), START) is None


def test_a_gone_fact_removes_its_host() -> None:
    world = World()
    (key,) = world.launch()
    world.at(JOIN + 1)
    world.ctl.commit(world.fact(FactKind.LOST, key, instance_id=world.info(key).instance_id))
    assert world.ctl.hosts() == []
    assert world.events[-1].kind == "lost"


def test_facts_of_an_op_long_gone_leave_the_view_but_not_the_figures() -> None:
    world = World(keep_gone=600.0)
    (gone,) = world.launch(op="op-00000001-000000000001")
    (kept,) = world.launch(op="op-00000002-000000000002")
    world.ctl.commit(world.fact(FactKind.RETURNED, gone, op="op-00000001-000000000001"))
    world.at(599)
    assert len(world.ctl.facts("sim")) == 7
    world.at(601)
    assert {f.instance_key for f in world.ctl.facts("sim")} == {"", kept}
    assert {f.op_id for f in world.ctl.facts("sim")} == {"op-00000002-000000000002"}
    assert len(world.ctl.all_facts()["sim"]) == 7


def test_without_keep_gone_every_fact_stays_in_the_view() -> None:
    world = World(keep_gone=None)
    (gone,) = world.launch()
    world.ctl.commit(world.fact(FactKind.RETURNED, gone))
    world.at(100_000)
    assert len(world.ctl.facts("sim")) == 4


def test_a_warm_pool_instance_joins_a_join_latency_after_its_start_not_after_its_launch() -> None:
    world = World()
    key = instance_key("op-00000001-000000000001", 0)
    inst = world.cloud.create(key, "sim", f"h-{key}", {"xce:template": "cpu"}, "c8.large", START)
    world.at(1000)
    start = "op-00000002-000000000002"
    world.ctl.commit(world.fact(FactKind.REQUEST_INTENT, op=start, detail=start_detail([key])))
    world.ctl.commit(world.fact(FactKind.EXPECTED_HOST, key, op=start, instance_id=inst.instance_id, host_name="h"))
    world.at(1000 + JOIN - 1)
    assert world.state(key) == "expected"
    world.at(1000 + JOIN + 1)
    assert world.state(key) == "idle"
