"""Two daemons, four simulated providers, one throw-away PostgreSQL: a crash and an outage.

The setup is ``tests/scaleout_world.py`` (each daemon an ``xceprov daemon`` process with its own
state directory, so its own lease holder and member row; one cluster, the simulated cloud, the
database with ``terraform.backend: pg``). The split itself and a clean stop are
``test_scaleout_split.py``. Here, what an operator would check after a failure:

- ``kill -9`` of one daemon in the middle of a burst: the other takes its providers once their
  leases have lapsed, resumes the op the dead one left open, and in the end the cloud, the
  controller's facts and the shared desired sets tell the same story, nothing leaked or made
  twice;
- the database stopped for a while: no cloud mutation at all meanwhile, ``xceprov status`` says
  the store is unreachable and since when, and the waiting work is done once it is back;
- in both, the cloud's mutation journal shows per provider epochs that never go back
  (``tests/mutation_journal.py``).

Each provider has room for 3 instances. The crash asks for all 12, so whichever daemon acts,
and whenever, the end state is known; the outage asks for 8, exactly what must be made.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from mutation_journal import assert_epochs_never_interleave, epoch_order
from scaleout_world import PROVIDERS, Member, Scaleout, scaleout_world
from sim_controller_helpers import client_cert
from sim_world_helpers import agree

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import Fact
from orchestrator.clients.postgres import SharedStore
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import FactKind
from orchestrator.ops.openops import open_ops
from orchestrator.sim.cloud.store import Instance
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

ROOM = 3  # max_instances of each provider
FULL = ROOM * len(PROVIDERS)
WANTED = 8  # the outage's demand: less than the room, so a gap answered twice would show
# What a daemon logs when its heartbeat fails (orchestrator/daemon/members.py).
STORE_DOWN = "shared store unreachable: every provider's fence is closed"
# How long the database stays away once both daemons closed their fences: a few passes (2 s).
OUTAGE = 8.0


def started(w: Scaleout, name: str) -> Member:
    """Daemon ``name`` with room for ``ROOM`` instances per provider."""
    member = w.member(name)
    cfg = yaml.safe_load(member.config.read_text())
    for provider in cfg["providers"].values():
        provider["max_instances"] = ROOM
    member.config.write_text(yaml.safe_dump(cfg))
    return member.start()


def two_daemons(w: Scaleout) -> tuple[Member, Member]:
    a = started(w, "a")
    w.wait_for("daemon a holding every provider", lambda: set(a.held()) == set(PROVIDERS))
    b = started(w, "b")
    w.wait_split(a, b)
    return a, b


def facts(w: Scaleout) -> list[Fact]:
    """Every fact of the four providers at the controller, in commit order."""
    cert, key = client_cert(w.world.sim, "provisioner", "test-reader")
    settings = ControllerSettings(
        addresses=[f"127.0.0.1:{w.world.port}"],
        ca=w.world.sim / "tls" / "ca.pem",
        client_cert=cert,
        client_key=key,
        connect_timeout=2.0,
        request_timeout=5.0,
        lease_margin=0.5,
    )
    with ControllerLink(settings, instance_id="test-reader", providers=list(PROVIDERS)) as link:
        link.open()
        return sorted((f for p in PROVIDERS for f in link.query_facts(p)), key=lambda f: f.fact_id)


class View:
    """What ``sim_world_helpers.agree`` reads, over the four providers."""

    def __init__(self, w: Scaleout) -> None:
        self.w = w
        self.cluster = w.world.cluster
        self.store = w.world.store

    def facts(self) -> list[Fact]:
        return facts(self.w)

    def alive(self) -> dict[str, Instance]:
        return self.w.world.alive()


def by_provider(w: Scaleout) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {p: set() for p in PROVIDERS}
    for key, inst in w.world.alive().items():
        out.setdefault(inst.tags.get("xce:provider", ""), set()).add(key)
    return out


def settled(w: Scaleout, total: int = FULL) -> bool:
    """``total`` instances in the cloud and no op open at the controller."""
    return len(w.world.alive()) == total and open_ops(facts(w)) == []


def desired_keys(w: Scaleout) -> dict[str, set[str]]:
    """The keys of every shard's desired set in the shared store, per provider."""
    store = SharedStore.open(w.pg.conn_str, w.world.cluster)
    try:
        out: dict[str, set[str]] = {}
        for provider in PROVIDERS:
            keys: set[str] = set()
            for body in store.read_documents(provider, "desired/").values():
                keys |= set(json.loads(body).get("instances") or {})
            out[provider] = keys
        return out
    finally:
        store.close()


def applying(member: Member, providers: set[str]) -> bool:
    """The daemon's audit log shows an apply started on one of ``providers``."""
    path = member.state / "audit.log"
    if not path.exists():
        return False
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return any(e.get("action") == "op-apply" and e.get("provider") in providers for e in entries)


def test_kill9_of_one_daemon_mid_burst_the_other_takes_over_and_resumes(tmp_path: Path) -> None:
    with scaleout_world(tmp_path) as w:
        a, b = two_daemons(w)
        held_a = a.held()
        # Slow launches keep the dead daemon's apply in flight when it is killed.
        w.world.store.set_slow_launch(4.0)
        admin.submit(w.world.sim, "cpu", FULL, 900.0)
        w.wait_for("daemon a applying on its providers", lambda: applying(a, set(held_a)))
        a.kill9()
        left_open = [op for op in open_ops(facts(w)) if op.provider in held_a]
        assert left_open, "daemon a had no op open when it was killed"
        w.world.store.set_slow_launch(0.0)

        w.wait_for("daemon b holding every provider", lambda: set(b.held()) == set(PROVIDERS), timeout=180)
        taken = b.held()
        for provider, epoch in held_a.items():
            assert epoch_order(taken[provider]) > epoch_order(epoch), (provider, epoch, taken[provider])
        w.wait_for("every provider full and no op open", lambda: settled(w), timeout=180)

        agree(View(w))  # no duplicate, no leak, no open op: cloud and facts agree
        assert {p: len(k) for p, k in by_provider(w).items()} == dict.fromkeys(PROVIDERS, ROOM)
        desired = desired_keys(w)
        for provider, keys in by_provider(w).items():
            assert desired[provider] == keys, (provider, sorted(desired[provider]), sorted(keys))
        # The ops daemon a left open were finished by daemon b: their missing outcomes carry b's epoch.
        everything = facts(w)
        for op in left_open:
            finished = {
                f.epoch.tag() for f in everything if f.op_id == op.op_id and f.kind == FactKind.INSTANCE_CREATED
            }
            assert taken[op.provider] in finished, (op, finished)
            assert finished <= {held_a[op.provider], taken[op.provider]}, (op, finished)
        journal = assert_epochs_never_interleave(w.world.sim / "cloud.sqlite")
        assert {m.provider for m in journal if m.action == "create"} == set(PROVIDERS)


def test_the_database_stopped_for_a_while_stops_every_mutation_then_work_resumes(tmp_path: Path) -> None:
    with scaleout_world(tmp_path) as w:
        a, b = two_daemons(w)
        before = len(w.world.store.mutations())
        logged = {m.name: len(m.log()) for m in (a, b)}
        w.pg.stop()
        try:
            # Less than the room: both daemons see the gap, one answers it (one scale-out at a time).
            admin.submit(w.world.sim, "cpu", WANTED, 900.0)
            for m in (a, b):
                w.wait_for(
                    f"daemon {m.name} closing its fence for the store",
                    lambda m=m: STORE_DOWN in m.log()[logged[m.name] :],
                )
            # The outage lasts a few passes of each daemon, the demand in view: nothing may move.
            time.sleep(OUTAGE)
            status = a.xceprov("status")
            during = w.world.store.mutations()[before:]
        finally:
            w.pg.start()
        assert during == [], during
        w.wait_for("the waiting work done", lambda: settled(w, WANTED), timeout=180)
        agree(View(w))
        assert_epochs_never_interleave(w.world.sim / "cloud.sqlite")
        # What the operator read during the outage: the store unreachable, and since when.
        assert "shared store  UNREACHABLE" in status.stdout, status.stdout
        assert "store unreachable since" in status.stdout, status.stdout
