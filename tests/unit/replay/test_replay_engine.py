"""The replay's model Terraform engine, driven by the REAL executor (create, refusal, loss, return).

What a user of ``xceprov replay`` would notice: instances appear in the model cloud on the offering
they were rendered on, launched one drawn launch latency after the create's apply began, and the
ledger's launch time of each is exactly the cloud's; a capacity window refuses one offering's keys
while the others of the same op are made, and the refusal reads as capacity (a quota window: as
quota, nothing made); a spot reclaim is judged lost at once by the real loss observer and never
re-created; a return ends the instance at the clock's time; a saved plan whose state moved is
refused as stale.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import CapacityRefused, QuotaRefused, StaleState
from orchestrator.model.costs import launch_time_of
from orchestrator.model.facts import FactKind
from orchestrator.model.modules import MODULES, FailureClass, error_rules
from orchestrator.model.offerings import Placement
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import Executor
from orchestrator.ops.losses import observer_for
from orchestrator.ops.openops import open_ops
from orchestrator.ops.plancheck import resource_keys
from orchestrator.ops.refusal import classify, refused_keys
from orchestrator.reconcile.classify import classify_error
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import RUNNING, STOPPED, TERMINATED, ModelCloud
from orchestrator.replay.engine import ModelEngine
from orchestrator.replay.model import CAPACITY, QUOTA, Latencies, RefusalWindow, WorldModel
from orchestrator.replay.tfmodel import Site, refusal_diagnostic
from orchestrator.workspace.desired import DESIRED
from orchestrator.workspace.workdir import ProviderWorkdir

# --import-mode=importlib: the shared helpers live in tests/ (no conftest here: the directory is shared).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import SITE, FakeHosts, MemoryFacts, unit_executor

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
LAUNCH = 45.0
OFFERINGS = """
  wide:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c8.large}}
          - {{flavor: c16.large, zone: zone-b, cost_per_hour: 0.8, slots: 2}}
"""


class World:
    """A model cloud and its engine under a real executor (real loss observer), on a virtual clock."""

    def __init__(self, tmp_path: Path, *refusals: RefusalWindow) -> None:
        text = (SITE + OFFERINGS).format(cluster="unit", state=tmp_path / "state")
        self.loaded: LoadedConfig = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
        self.clock = VirtualClock(START)
        self.cloud = ModelCloud()
        model = WorldModel(START, START + 86_400, (), Latencies(launch=(LAUNCH,)), refusals=refusals)
        self.engine = ModelEngine(self.cloud, model, self.clock, random.Random(7))
        self.facts = MemoryFacts()
        self.hosts = FakeHosts()

    def executor(self) -> Executor:
        return unit_executor(
            self.loaded,
            self.engine,  # type: ignore[arg-type]
            facts=self.facts,
            hosts=self.hosts,
            losses=observer_for,
            clock=self.clock,
            sleep=self.clock.sleep,
        )

    @property
    def workdir(self) -> Path:
        return ProviderWorkdir(self.loaded.config, "sim", Path(__file__).resolve().parents[3]).path

    def kinds(self, kind: FactKind) -> list[str]:
        return [f.instance_key for f in self.facts.committed if f.kind == kind]


def test_a_create_makes_the_instances_on_their_offerings_after_one_launch_latency(tmp_path: Path) -> None:
    world = World(tmp_path)
    placements = (Placement("c16.large@zone-b", 1), Placement("c8.large", 2))

    made = world.executor().create("sim", "wide", 3, placements=placements)

    # One apply, one latency: the clock moved once, not once per instance.
    assert world.clock() == START + LAUNCH
    cloud = {c.key: world.cloud.instances[c.key] for c in made.created}
    assert sorted(i.offering for i in cloud.values()) == ["c16.large@zone-b", "c8.large", "c8.large"]
    assert {i.launched for i in cloud.values()} == {START + LAUNCH}
    assert {i.state for i in cloud.values()} == {RUNNING}
    assert {i.provider for i in cloud.values()} == {"sim"}
    assert {i.template for i in cloud.values()} == {"wide"}
    # The ledger's start of each instance is the cloud's launch, exactly.
    created = [f for f in world.facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    assert sorted(f.instance_key for f in created) == sorted(cloud)
    assert {f.instance_key: launch_time_of(f.detail) for f in created} == {k: i.launched for k, i in cloud.items()}
    assert {c.instance_id for c in made.created} == {i.instance_id for i in cloud.values()}
    assert sorted(world.kinds(FactKind.EXPECTED_HOST)) == sorted(cloud)
    # Addressed, distinct, and fake (nothing reaches a replayed host).
    assert sorted(c.address for c in made.created) == ["10.64.0.2", "10.64.0.3", "10.64.0.4"]


def test_a_capacity_window_refuses_its_offering_and_the_rest_of_the_op_is_made(tmp_path: Path) -> None:
    window = RefusalWindow(CAPACITY, "sim", "c16.large@zone-b", START, START + 600)
    world = World(tmp_path, window)
    executor = world.executor()
    placements = (Placement("c16.large@zone-b", 2), Placement("c8.large", 1))

    with pytest.raises(CapacityRefused) as caught:
        executor.create("sim", "wide", 3, "op-6b49d200-0123456789ab", placements=placements)

    assert classify_error(caught.value).kind == FailureClass.CAPACITY
    refused = {f"op-6b49d200-0123456789ab-00{i}" for i in (0, 1)}
    assert dict(caught.value.refused) == dict.fromkeys(refused, "capacity")
    assert "InsufficientCapacity: flavor c16.large in zone zone-b has no capacity" in str(caught.value)
    # The key on the other offering was made (partial success) and the state holds it.
    made = "op-6b49d200-0123456789ab-002"
    assert [i.key for i in world.cloud.live()] == [made]
    assert world.cloud.instances[made].launched == START + LAUNCH
    assert sorted(world.engine.output(world.workdir)["instances"]) == [made]
    # The executor's close records what exists and drops what was refused.
    [op] = open_ops(world.facts.facts("sim"))
    evidence = executor.close_refused(op, "capacity", check_listing=False)
    assert evidence["recorded"] == [made]
    assert sorted(evidence["dropped"]) == sorted(refused)
    assert world.kinds(FactKind.INSTANCE_CREATED) == [made]


def test_after_the_capacity_window_the_offering_is_made_again(tmp_path: Path) -> None:
    window = RefusalWindow(CAPACITY, "sim", "c16.large@zone-b", START, START + 600)
    world = World(tmp_path, window)
    world.clock.to(START + 601)

    made = world.executor().create("sim", "wide", 1, placements=(Placement("c16.large@zone-b", 1),))

    assert [world.cloud.instances[c.key].offering for c in made.created] == ["c16.large@zone-b"]


def test_a_quota_window_refuses_every_offering_and_takes_no_launch_time(tmp_path: Path) -> None:
    world = World(tmp_path, RefusalWindow(QUOTA, "sim", "", START, START + 600))

    with pytest.raises(QuotaRefused) as caught:
        world.executor().create("sim", "cpu", 2)

    assert classify_error(caught.value).kind == FailureClass.QUOTA
    assert set(caught.value.refused.values()) == {"quota"}
    assert "InstanceLimitExceeded" in str(caught.value)
    assert list(world.cloud.live()) == []
    assert world.clock() == START  # nothing was launched: no modelled launch time


def test_a_spot_reclaim_is_judged_lost_at_once_and_never_re_created(tmp_path: Path) -> None:
    world = World(tmp_path)
    first = world.executor().create("sim", "cpu", 2)
    gone, kept = first.created
    world.clock.advance(300)
    world.cloud.end(gone.key, world.clock(), "spot-reclaim")

    second = world.executor().create("sim", "cpu", 1)

    [lost] = [f for f in world.facts.committed if f.kind == FactKind.LOST]
    assert (lost.instance_key, lost.instance_id) == (gone.key, gone.instance_id)
    assert json.loads(lost.detail)["reason"] == "spot-reclaim"
    # The reclaimed key left the desired set and the state; nothing made it again.
    assert gone.key not in world.engine.output(world.workdir)["instances"]
    assert world.cloud.instances[gone.key].state == TERMINATED
    assert sorted(i.key for i in world.cloud.live()) == sorted([kept.key, second.created[0].key])


def test_a_return_ends_the_instance_at_the_clocks_time(tmp_path: Path) -> None:
    world = World(tmp_path)
    made = world.executor().create("sim", "cpu", 2)
    world.clock.advance(3_600)
    key = made.created[0].key

    result = world.executor().return_instances("sim", [key], drain=DrainSettings(drain=False))

    assert result.deleted == [key]
    inst = world.cloud.instances[key]
    assert (inst.state, inst.ended, inst.reason) == (TERMINATED, START + LAUNCH + 3_600, "")
    assert world.kinds(FactKind.RETURNED) == [key]
    assert sorted(world.engine.output(world.workdir)["instances"]) == [made.created[1].key]


def test_a_warm_pool_instance_is_launched_stopped_and_started_in_place(tmp_path: Path) -> None:
    world = World(tmp_path)
    [pooled] = world.executor().create("sim", "cpu", 1, pool=True).created
    assert world.cloud.instances[pooled.key].state == STOPPED

    world.executor().start_pool("sim", "cpu", [pooled.key])

    inst = world.cloud.instances[pooled.key]
    assert (inst.state, inst.instance_id) == (RUNNING, pooled.instance_id)


def test_a_saved_plan_whose_state_moved_is_refused_as_stale(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.executor().create("sim", "cpu", 1)
    engine, workdir = world.engine, world.workdir
    engine.plan(workdir, [Path(DESIRED)], out=Path("a.tfplan"))
    engine.plan(workdir, [Path(DESIRED)], out=Path("b.tfplan"))
    engine.apply(workdir, Path("a.tfplan"))  # changes nothing: the serial stays
    world.cloud.end(next(iter(engine.output(workdir)["instances"])), world.clock(), "spot-reclaim")
    engine.plan(workdir, [Path(DESIRED)], out=Path("c.tfplan"))
    engine.apply(workdir, Path("c.tfplan"))  # writes the drift: the serial moves

    with pytest.raises(StaleState):
        engine.apply(workdir, Path("b.tfplan"))


def test_the_ledgers_launch_time_is_the_clocks_to_the_microsecond(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.clock.to(START + 0.123_456_789)

    [made] = world.executor().create("sim", "cpu", 1).created

    inst = world.cloud.instances[made.key]
    assert abs(inst.launched - (START + 0.123_456_789 + LAUNCH)) < 1e-6
    [fact] = [f for f in world.facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    assert launch_time_of(fact.detail) == inst.launched


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize(("scope", "kind"), [(CAPACITY, FailureClass.CAPACITY), (QUOTA, FailureClass.QUOTA)])
def test_a_refusal_is_worded_so_that_each_modules_rules_read_its_class(
    module: str, scope: str, kind: FailureClass
) -> None:
    site = Site(MODULES[module], "sim", "unit", True)
    window = RefusalWindow(scope, "sim", "c8.large@zone-b" if scope == CAPACITY else "", START, START + 60)
    diagnostic = refusal_diagnostic(site, "op-1-000", {"flavor": "c8.large", "zone": "zone-b"}, window)

    assert classify([diagnostic], error_rules(module)).kind == kind
    assert refused_keys([diagnostic], error_rules(module)) == {"op-1-000": kind.value}


def test_a_directory_that_does_not_list_shows_no_listing(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.executor().create("sim", "cpu", 1)
    document = json.loads((world.workdir / DESIRED).read_text())
    (world.workdir / "shard.json").write_text(json.dumps({**document, "settings": {"list_tagged": False}}))

    world.engine.plan(world.workdir, [Path("shard.json")], out=Path("s.tfplan"), refresh_only=True)
    shown = world.engine.show_plan(world.workdir, Path("s.tfplan"))["planned_values"]["outputs"]

    assert (shown["tagged_supported"]["value"], shown["tagged"]["value"]) == (False, {})
    world.engine.plan(world.workdir, [Path(DESIRED)], out=Path("l.tfplan"), refresh_only=True)
    listed = world.engine.show_plan(world.workdir, Path("l.tfplan"))["planned_values"]["outputs"]
    assert [o["state"] for o in listed["tagged"]["value"].values()] == [RUNNING]


def test_a_reclaim_is_found_by_the_loss_path_without_waiting_for_a_create(tmp_path: Path) -> None:
    """The daemon's notice watch asks the executor's host-loss path once a reclaim is due
    (``observe_losses``): over the model engine the listing's reason settles it in that one call."""
    world = World(tmp_path)
    gone, kept = world.executor().create("sim", "cpu", 2).created
    world.cloud.end(gone.key, world.clock(), "spot-reclaim")

    found = world.executor().observe_losses("sim", [gone.key], "op-6b49d200-00000000000a")

    assert found == [gone.key]
    [lost] = [f for f in world.facts.committed if f.kind == FactKind.LOST]
    assert (lost.instance_key, json.loads(lost.detail)["reason"]) == (gone.key, "spot-reclaim")
    assert sorted(world.executor().desired("sim")) == [kept.key]


def test_the_state_documents_name_every_held_key(tmp_path: Path) -> None:
    world = World(tmp_path)
    made = world.executor().create("sim", "cpu", 2).created
    keys = {c.key for c in made}

    assert resource_keys(world.engine.show_state(world.workdir)) == keys
    pulled = world.engine.state_pull(world.workdir)
    assert {i["index_key"] for r in pulled["resources"] for i in r["instances"]} == keys
    assert pulled["serial"] == 1  # one apply changed the state
