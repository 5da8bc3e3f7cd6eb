"""Faults of the fenced path on a whole simulated world (``xceprov sim up`` on a test configuration).

Driven only through the command line, as an operator would: a ``kill -9`` during the bootstrap
(hosts over real SSH), a spot reclaim and an out-of-band delete seen by the next ops, and a busy
host with the controller's real drain (``closing`` until its work ends). After each: the
instances in the simulated cloud and the facts at the simulated controller agree exactly, none
duplicated, none leaked. The moment of the kill is found from outside (the host's ``/etc/xce``
files appearing), never by a crash switch in the product.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_labs import claim_test_lab
from sim_world_helpers import SimWorld, agree, kill9_tree, sim_world, wait_until

from orchestrator.model.facts import FactKind
from orchestrator.sim.hosts import lab as labnet

pytestmark = pytest.mark.integration


def _can_run_hosts() -> bool:
    try:
        import capnp  # noqa: F401  (the simulated node manager bundles pycapnp)
    except ImportError:
        return False
    return os.geteuid() == 0


@pytest.fixture(scope="module")
def hosts_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    """One world with simulated hosts in the module's own lab, shared by the tests that need hosts."""
    if not _can_run_hosts():
        pytest.skip("simulated hosts need root and pycapnp (the node manager artifact)")
    site = tmp_path_factory.mktemp("hosts-world")
    lab = claim_test_lab(f"{os.getpid()}/{__name__}")
    try:
        with sim_world(site, f"fh{os.getpid()}", lab) as world:
            yield world
    finally:
        labnet.destroy_lab(lab)


@pytest.fixture(scope="module")
def cloud_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    """A world with the controller and the cloud only (no hosts: host loss needs none)."""
    with sim_world(tmp_path_factory.mktemp("cloud-world"), f"fc{os.getpid()}") as world:
        yield world


def _op_of(world: SimWorld, bundle: Path) -> str:
    """The op a bundle was applied as (the audit log's ``apply`` entry names it)."""
    [entry] = [e for e in world.audit() if e["action"] == "apply" and e.get("bundle") == str(bundle)][-1:]
    [(op_id, _template, _count)] = entry["ops"]
    return str(op_id)


def _keys_of(world: SimWorld, op_id: str) -> list[str]:
    return sorted(f.instance_key for f in world.facts() if f.kind == FactKind.INSTANCE_CREATED and f.op_id == op_id)


def _host_file(world: SimWorld, instance_id: str, path: str) -> Path:
    """A file inside a simulated host, read from its overlay's upper dir (what the host wrote)."""
    return world.sim / "hosts" / instance_id / "upper" / path.lstrip("/")


def _joined(world: SimWorld, keys: list[str]) -> bool:
    hosts = world.hosts()
    return all(k in hosts and hosts[k].state == "idle" and hosts[k].joined_at > 0 for k in keys)


@pytest.mark.root
def test_kill_during_the_bootstrap_then_resume_and_bootstrap(hosts_world: SimWorld) -> None:
    world = hosts_world
    bundle = world.bundle("boot", "cpu=2")
    proc = world.spawn("apply", str(bundle), "--bootstrap")

    def bootstrapping() -> bool:
        # The op's instance facts are in (op-created, the bootstrap's start) and the play has
        # written the controller's CA into the host's /etc/xce (cloud-init writes other files there).
        started = "op-created" in world.actions(proc.pid)
        return (started and any((world.sim / "hosts").glob("*/upper/etc/xce/ca.pem"))) or proc.poll() is not None

    wait_until("the bootstrap play writing /etc/xce/ca.pem on the host", bootstrapping, timeout=180)
    kill9_tree(proc)
    op_id = _op_of(world, bundle)
    actions = world.actions(proc.pid)
    # Killed inside the bootstrap: the instance facts are in, the bootstrap's outcome is not.
    assert "op-created" in actions and "op-bootstrap" not in actions, actions
    keys = _keys_of(world, op_id)
    made = {k: world.alive()[k] for k in keys}
    assert len(made) == 2

    world.ok_once_leased("ops", "resume")  # the killed command's lease runs out first
    assert world.open_ops() == []
    assert set(agree(world)) == set(keys)  # the crash after the facts left nothing to redo
    results = json.loads(world.ok("bootstrap", "--op", op_id, "--json"))

    assert {results[i.name]["status"] for i in made.values()} <= {"changed", "ok"}, results
    wait_until("the hosts joining the simulated controller", lambda: _joined(world, keys), timeout=120)
    for key, inst in made.items():
        assert world.hosts()[key].instance_id == inst.id
        assert "joined controller" in _host_file(world, inst.id, "/var/log/xce/node-manager.log").read_text()
    # Nothing was created twice: the op's two instances in the cloud, ever; facts and cloud agree.
    every = world.store.list_instances({"xce:op_id": op_id}, include_terminated=True)
    assert sorted(i.id for i in every) == sorted(i.id for i in made.values())
    assert set(agree(world)) == set(keys)


def _two_joined_hosts(world: SimWorld) -> list[str]:
    """Two joined, idle hosts of the world: the ones an earlier test left (a bootstrap takes a
    while), else new ones made here; any other host of the world is returned first."""
    hosts = world.hosts()
    idle = sorted(k for k in world.alive() if k in hosts and hosts[k].state == "idle")[:2]
    if len(idle) < 2:
        world.ok_once_leased(
            "apply", str(world.bundle(f"busy{len(world.audit())}", f"cpu={2 - len(idle)}")), "--bootstrap"
        )
        fresh = sorted(set(world.alive()) - set(hosts))
        idle += fresh
        wait_until("both hosts joined", lambda: _joined(world, idle), timeout=120)
    for other in sorted(set(world.alive()) - set(idle)):
        world.ok("return", other, "--now")
    assert set(world.alive()) == set(idle)
    return idle


@pytest.mark.root
def test_a_busy_host_is_refused_then_drained_then_forced(hosts_world: SimWorld) -> None:
    world = hosts_world
    keys = _two_joined_hosts(world)

    # One host runs short work (the drain waits for it), the other long work (only force ends it).
    # The short work outlasts the commands before the drain by far, even on a loaded machine
    # (45 s did not, with three test processes on two cores).
    world.ok("sim", "submit", "--template", "cpu", "--hosts", "1", "--duration", "75s")

    def busy() -> list[str]:
        hosts = world.hosts()
        return [k for k in keys if hosts[k].state == "busy"]

    wait_until("one host busy", lambda: len(busy()) == 1, timeout=30)
    [short] = busy()
    [long] = [k for k in keys if k != short]
    world.ok("sim", "submit", "--template", "cpu", "--hosts", "1", "--duration", "600s")
    wait_until("both hosts busy", lambda: world.hosts()[long].state == "busy", timeout=30)
    names = {k: i.name for k, i in world.alive().items()}
    facts_before = len(world.facts())

    timed_out = world.xceprov("return", names[short], "--drain-timeout", "1s")
    assert timed_out.returncode == 75, timed_out.stderr
    assert "drain timeout" in timed_out.stderr and "stay closed" in timed_out.stderr
    # Closed (no new work), its work still running, nothing returned yet: run it again later.
    assert world.hosts()[short].state == "closing"
    assert set(world.alive()) == set(keys) and len(world.facts()) == facts_before
    assert world.open_ops() == []

    drained = world.spawn("return", names[short])
    wait_until("the drain to start", lambda: "op-drain" in world.actions(drained.pid) or drained.poll() is not None)
    # The return waits while the host is closing: its work runs on, nothing is returned yet.
    assert drained.poll() is None and world.hosts()[short].state == "closing"
    assert set(world.alive()) == set(keys)
    _, err = drained.communicate(timeout=180)
    assert drained.returncode == 0, err
    actions = world.actions(drained.pid)
    assert actions.index("op-drain") < actions.index("op-decommission") < actions.index("fact-returning")
    assert "op-drain-timeout" not in actions and "op-return-forced" not in actions
    assert world.hosts()[short].state == "decommissioned"
    assert set(agree(world)) == {long}

    facts_before = len(world.facts())
    refused = world.xceprov("destroy", "--all")
    assert refused.returncode == 10, refused.stderr
    # The one error line; the plan's progress line before it is not an error.
    [line] = [ln for ln in refused.stderr.splitlines() if ln.startswith("xceprov: ")]
    assert f"{names[long]}: joined and running work" in line and "--force" in line
    assert set(world.alive()) == {long} and len(world.facts()) == facts_before
    assert world.actions()[-1] == "op-return-refused"

    forced = world.xceprov("destroy", "--all", "--force")
    assert forced.returncode == 0, forced.stderr
    [entry] = [e for e in world.audit() if e["action"] == "op-return-forced"]
    assert entry["busy"] == [long]
    # The controller decommissioned a host under running work: only a forced decommission does.
    assert world.hosts()[long].state == "decommissioned"
    returning = [f for f in world.facts() if f.kind == FactKind.RETURNING and f.instance_key == long]
    assert len(returning) == 1 and returning[0].op_id == entry["op"]
    assert agree(world) == {}


def test_spot_reclaim_and_out_of_band_delete_are_lost_never_recreated(cloud_world: SimWorld) -> None:
    world = cloud_world
    world.ok("apply", str(world.bundle("three", "cpu=3")))
    first = _op_of(world, world.site / "three")
    keys = _keys_of(world, first)
    assert len(keys) == 3 and set(agree(world)) == set(keys)
    reclaimed, deleted, kept = keys
    ids = {k: i.id for k, i in world.alive().items()}

    out = world.ok("sim", "fault", "spot-reclaim", ids[reclaimed])
    assert "spot-reclaim" in out
    next1 = world.bundle("next1", "cpu=1")
    # The preview already showed it lost (the bundle names it), so its apply may record it.
    assert json.loads((next1 / "manifest.json").read_text())["providers"][0]["lost"] == [reclaimed]
    world.ok("apply", str(next1))
    second = _op_of(world, world.site / "next1")

    # Lost at once (the cloud says reclaimed), out of the desired set, never re-created.
    [lost] = [f for f in world.facts() if f.kind == FactKind.LOST]
    assert (lost.instance_key, lost.instance_id) == (reclaimed, ids[reclaimed])
    assert json.loads(lost.detail)["reason"] == "spot-reclaim"
    desired = json.loads((world.state / "work" / world.cluster / "sim" / "desired.tfvars.json").read_text())
    assert reclaimed not in desired["instances"]
    assert set(agree(world)) == {deleted, kept, *_keys_of(world, second)}

    world.ok("sim", "fault", "delete", ids[deleted])
    # Missing once is not lost yet (one read can race the cloud's API): the op's own plan finds
    # it gone, the executor reads the cloud a second time before the apply; both find it gone,
    # so it is lost (reason missing), out of the desired set, never re-created, and the burst
    # goes on.
    next3 = world.bundle("next3", "cpu=1")
    assert json.loads((next3 / "manifest.json").read_text())["providers"][0]["lost"] == [deleted]
    world.ok("apply", str(next3))
    fourth = _op_of(world, world.site / "next3")
    gone = [f for f in world.facts() if f.kind == FactKind.LOST]
    assert [f.instance_key for f in gone] == [reclaimed, deleted]
    assert json.loads(gone[1].detail)["reason"] == "missing"
    assert json.loads(gone[1].detail)["observations_missing"] == 2

    survivors = {kept, *(k for op in (second, fourth) for k in _keys_of(world, op))}
    assert set(agree(world)) == survivors
    every = world.store.list_instances({"xce:cluster": world.cluster}, include_terminated=True)
    assert sorted(i.client_token for i in every) == sorted([*keys, *survivors - {kept}])
    assert {i.client_token: i.state_reason for i in every if i.state == "terminated"} == {
        reclaimed: "spot-reclaim",
        deleted: "out-of-band-delete",
    }
