"""The documents seam: the local layout as it always was, and with ``terraform.backend: pg`` the
shared store, from which a successor with an empty state directory reads everything.

Two "instances" are two configurations of one cluster with different state directories; the
store is a throw-away PostgreSQL server (tests/pg_server.py), one per module, a fresh database
per test.
"""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, FakeFence, site_config, unit_ops, unit_parts

from orchestrator.configfile import LoadedConfig
from orchestrator.daemon.publish import StatusPublishing
from orchestrator.errors import FinalError, LeaseHeld, LeaseLost, StoreUnavailable
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import Config
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import InstanceSpec
from orchestrator.ops.executor import ShardSet
from orchestrator.ops.facts import SharedFacts, standalone_facts
from orchestrator.ops.fence import STANDALONE_EPOCH, LeasedFence, standalone_fence
from orchestrator.ops.hostloss import LossTracker
from orchestrator.orphans.limits import RateLimit
from orchestrator.reconcile.bootstraps import BootstrapTracker
from orchestrator.reconcile.breaker import Breakers, Position
from orchestrator.services.apply import apply_bundle
from orchestrator.services.breaker import reset_breaker
from orchestrator.services.migrate_documents import migrate_documents
from orchestrator.services.plan import plan_burst
from orchestrator.services.status import breaker_rows
from orchestrator.workspace.documents import LocalDocuments
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.sharedstore import cluster_documents, store_for
from tests.pg_server import PgServer

NOW = 1_800_000_000.0
SUSPECT = {"instance_id": "i-1", "missing": 1, "first_missing": "2026-12-02T06:00:00Z"}


def pg_site(tmp_path: Path, name: str, cluster: str = "shared") -> LoadedConfig:
    """One instance: the unit site with ``terraform.backend: pg`` and a state directory of its own."""
    base = tmp_path / name
    base.mkdir()
    loaded = site_config(base, cluster=cluster, shard_size=2)
    raw = loaded.config.model_dump(mode="json")
    raw["terraform"]["backend"] = "pg"
    return LoadedConfig(Config.model_validate(raw), loaded.source, loaded.base_dir)


def variables(shards: ProviderShards, index: int, keys: list[str]) -> dict[str, object]:
    specs = {k: InstanceSpec(name=k, template="cpu", flavor="c8.large", image="debian-12", tags={}) for k in keys}
    return shards.shard(index).variables(specs, {"store": "cloud.sqlite"})


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()) if path.exists() else []


def record_everything(loaded: LoadedConfig) -> None:
    """What a holder keeps: desired sets (shards 0 and 2), suspects, a breaker, a bootstrap
    record, an orphan action; written the way the executor and the loop write them."""
    config = loaded.config
    shardset = ShardSet(unit_parts(loaded, None, fence=FakeFence((3, 7))))  # type: ignore[arg-type]
    shards = shardset.shards("sim")
    shards.shard(0).desired.write(variables(shards, 0, ["op1-000", "op1-001"]))
    shards.shard(2).desired.write(variables(shards, 2, ["op2-000"]))
    LossTracker(shards.shard(2).suspects).save({"op2-000": SUSPECT})
    documents = cluster_documents(config)
    breakers = Breakers.load(config.state_dir, config.policy.breaker, documents)
    for _ in range(config.policy.breaker.failures):
        breakers.failure("cpu", "bootstrap", "unreachable", NOW)
    bootstraps = BootstrapTracker.load(config.state_dir, documents)
    record = bootstraps.get("op1-000", "sim", "cpu", "h-op1-000")
    bootstraps.record(record, "ok", NOW, attempts=3, backoff=Backoff(), rng=random.Random(1))
    RateLimit(config.state_dir, config.policy.orphans, NOW, documents).take("sim")


def test_the_local_layout_is_the_files_it_always_was(tmp_path: Path) -> None:
    loaded = site_config(tmp_path, shard_size=2)
    record_everything(loaded)
    state = loaded.config.state_dir
    work = state / "work" / "unit" / "sim"
    assert files_under(state) == sorted(
        [
            "bootstrap.json",
            "bootstrap.json.lock",
            "breakers.json",
            "breakers.json.lock",
            "orphans/actions.json",
            "orphans/actions.json.lock",
            "work/unit/sim/desired.tfvars.json",
            "work/unit/sim/shards/2/desired.tfvars.json",
            "work/unit/sim/shards/2/lost-suspects.json",
        ]
    )
    assert sorted(json.loads((work / "desired.tfvars.json").read_text())["instances"]) == ["op1-000", "op1-001"]
    assert json.loads((work / "shards/2/lost-suspects.json").read_text())["suspects"] == {"op2-000": SUSPECT}
    for name in ("bootstrap.json", "breakers.json", "orphans/actions.json"):
        assert stat.S_IMODE((state / f"{name}.lock").stat().st_mode) == 0o600
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "orphans").stat().st_mode) == 0o700


def test_a_document_name_never_leaves_its_root(tmp_path: Path) -> None:
    documents = LocalDocuments(tmp_path / "root")
    for name in ("../breakers.json", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="not a relative name"):
            documents.write(name, b"{}")
    assert not (tmp_path / "breakers.json").exists()


def test_a_successor_with_an_empty_state_directory_sees_everything(tmp_path: Path, conn_str: str) -> None:
    holder, successor = pg_site(tmp_path, "a"), pg_site(tmp_path, "b")
    record_everything(holder)

    config = successor.config
    shards = ProviderShards(config, "sim", ROOT)
    assert [s.index for s in shards.all()] == [0, 2]
    assert shards.held() == {0: frozenset({"op1-000", "op1-001"}), 2: frozenset({"op2-000"})}
    assert LossTracker(shards.shard(2).suspects).suspects() == {"op2-000": SUSPECT}
    documents = cluster_documents(config)
    assert Breakers.load(config.state_dir, config.policy.breaker, documents).state("cpu").position == Position.OPEN
    [record] = BootstrapTracker.load(config.state_dir, documents).records()
    assert (record.key, record.ok) == ("op1-000", True)
    assert RateLimit(config.state_dir, config.policy.orphans, NOW + 1, documents).recent("sim") == 1
    # Placement from the store: held keys stay, new ones fill shard 2's free room, then a new shard.
    placed = shards.place("op3", ["op1-001", "op3-000", "op3-001", "op3-002"])
    assert {s.index: keys for s, keys in placed.items()} == {0: ["op1-001"], 2: ["op3-000"], 3: ["op3-001", "op3-002"]}
    # Nothing of it was ever on the successor's disk.
    assert files_under(config.state_dir) == []


def test_the_working_directorys_file_is_a_cache_rebuilt_from_the_store(tmp_path: Path, conn_str: str) -> None:
    holder = pg_site(tmp_path, "a")
    record_everything(holder)
    shard = ProviderShards(holder.config, "sim", ROOT).shard(2)
    cache = shard.desired_file
    recorded = cache.read_bytes()
    cache.unlink()
    shard.desired.refresh_cache()
    assert cache.read_bytes() == recorded
    cache.write_text("{}")  # a stale cache (another instance changed the record meanwhile)
    shard.desired.refresh_cache()
    assert cache.read_bytes() == recorded


def test_a_stale_holders_desired_set_write_is_refused_and_changes_nothing(tmp_path: Path, conn_str: str) -> None:
    new, old = pg_site(tmp_path, "new"), pg_site(tmp_path, "old")
    successor = ShardSet(unit_parts(new, None, fence=FakeFence((4, 1))))  # type: ignore[arg-type]
    zombie = ShardSet(unit_parts(old, None, fence=FakeFence((3, 7))))  # type: ignore[arg-type]
    shards = successor.shards("sim")
    shards.shard(0).desired.write(variables(shards, 0, ["op5-000"]))

    stale = zombie.shards("sim").shard(0)
    with pytest.raises(LeaseLost, match=r"holds epoch 4\.1, newer than this holder's 3\.7"):
        stale.desired.write(variables(zombie.shards("sim"), 0, ["op9-000"]))
    with pytest.raises(LeaseLost):
        LossTracker(stale.suspects).save({"op5-000": SUSPECT})
    assert sorted(ProviderShards(new.config, "sim", ROOT).shard(0).desired.read()) == ["op5-000"]
    assert not stale.desired_file.exists()  # the refused set never reached the zombie's Terraform either
    assert LossTracker(stale.suspects).suspects() == {}

    # A closed fence writes nothing at all, whatever the store holds.
    revoked = FakeFence((5, 0))
    revoked.revoked = True
    closed = ShardSet(unit_parts(new, None, fence=revoked)).shards("sim").shard(0)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost, match="revoked"):
        closed.desired.write(variables(shards, 0, []))
    assert sorted(closed.desired.read()) == ["op5-000"]


def test_outside_the_executor_the_shared_state_is_read_only(tmp_path: Path, conn_str: str) -> None:
    loaded = pg_site(tmp_path, "a")
    shards = ProviderShards(loaded.config, "sim", ROOT)
    with pytest.raises(LeaseLost, match="changes only under its lease"):
        shards.shard(0).desired.write(variables(shards, 0, ["op1-000"]))
    assert shards.shard(0).desired.read() == {}


def test_two_standalone_fences_on_one_provider_the_second_is_refused(tmp_path: Path, conn_str: str) -> None:
    first = standalone_fence(pg_site(tmp_path, "a").config, ["sim"])
    assert isinstance(first, LeasedFence)
    with first:
        assert first.gate("sim") == STANDALONE_EPOCH
        with pytest.raises(LeaseHeld, match=r"^provider sim: held by standalone command \d+@") as held:
            standalone_fence(pg_site(tmp_path, "b").config, ["sim"]).acquire()
        assert held.value.holder == first.holder
    with standalone_fence(pg_site(tmp_path, "c").config, ["sim"]) as third:  # released: taken at once
        assert third.valid("sim")


def test_a_database_restart_admits_no_second_standalone_command_and_keeps_the_first_s_gate(
    tmp_path: Path, conn_str: str, server: PgServer
) -> None:
    """Issue 27 item 5: the advisory lock died with the server's session, and a second command
    took the provider at once while the first one's apply still ran."""
    with standalone_fence(pg_site(tmp_path, "a").config, ["sim"]) as first:
        server.stop()
        server.start()
        with pytest.raises(LeaseHeld, match=f"held by {first.holder}"):
            standalone_fence(pg_site(tmp_path, "b").config, ["sim"]).acquire()
        assert first.gate("sim") == STANDALONE_EPOCH  # its lease still runs: nothing to interrupt


def test_standalone_facts_written_by_one_instance_are_read_by_the_next(tmp_path: Path, conn_str: str) -> None:
    first, second = pg_site(tmp_path, "a").config, pg_site(tmp_path, "b").config
    journal = standalone_facts(first)
    assert isinstance(journal, SharedFacts)
    intent = Fact(FactKind.REQUEST_INTENT, "sim", "op1", STANDALONE_EPOCH, template="cpu", count=2)
    created = Fact(FactKind.INSTANCE_CREATED, "sim", "op1", STANDALONE_EPOCH, instance_key="op1-000")
    journal.commit_many([intent, created])
    journal.commit(created)  # idempotent: a resumed op commits again
    seen = standalone_facts(second).facts("sim")
    assert [(f.kind, f.op_id, f.instance_key, f.fact_id) for f in seen] == [
        (FactKind.REQUEST_INTENT, "op1", "", 1),
        (FactKind.INSTANCE_CREATED, "op1", "op1-000", 2),
    ]
    assert seen[0].count == 2 and seen[0].epoch == STANDALONE_EPOCH
    assert files_under(second.state_dir) == [] and files_under(first.state_dir) == []


def test_the_store_is_opened_once_per_process(tmp_path: Path, conn_str: str) -> None:
    config = pg_site(tmp_path, "a").config
    assert store_for(config) is store_for(config)
    assert store_for(site_config(tmp_path / "a").config) is None  # the local backend has none


def test_two_instances_keep_each_others_bootstrap_records_and_orphan_actions(tmp_path: Path, conn_str: str) -> None:
    one, two = pg_site(tmp_path, "a").config, pg_site(tmp_path, "b").config
    mine = BootstrapTracker.load(one.state_dir, cluster_documents(one))
    theirs = BootstrapTracker.load(two.state_dir, cluster_documents(two))  # read before the first writes
    limits = RateLimit(two.state_dir, two.policy.orphans, NOW, cluster_documents(two))
    done = {"attempts": 3, "backoff": Backoff(), "rng": random.Random(1)}
    mine.record(mine.get("op1-000", "sim", "cpu", "h1"), "ok", NOW, **done)  # type: ignore[arg-type]
    RateLimit(one.state_dir, one.policy.orphans, NOW, cluster_documents(one)).take("sim")
    theirs.record(theirs.get("op2-000", "aws", "cpu", "h2"), "ok", NOW, **done)  # type: ignore[arg-type]
    limits.take("aws")

    reread = BootstrapTracker.load(one.state_dir, cluster_documents(one))
    assert [r.key for r in reread.records()] == ["op1-000", "op2-000"]
    assert (limits.recent("sim"), limits.recent("aws")) == (1, 1)
    # An instance forgets the gone hosts of its own providers only.
    assert theirs.prune([], providers=["aws"]) == ["op2-000"]
    assert [r.key for r in BootstrapTracker.load(one.state_dir, cluster_documents(one)).records()] == ["op1-000"]


def test_status_and_breaker_reset_of_another_instance_see_the_shared_breakers(tmp_path: Path, conn_str: str) -> None:
    holder, operator = pg_site(tmp_path, "a"), pg_site(tmp_path, "b")
    record_everything(holder)  # the holder's daemon opened the breaker of cpu
    [row] = breaker_rows(operator, now=NOW)
    assert (row["template"], row["position"]) == ("cpu", "open")
    assert reset_breaker(operator, "cpu", now=NOW).position == Position.OPEN  # what it was
    config = holder.config
    assert Breakers.load(config.state_dir, config.policy.breaker, cluster_documents(config)).allows("cpu", NOW)


def test_migrating_copies_every_local_state_file_into_the_store_once(tmp_path: Path, conn_str: str) -> None:
    (tmp_path / "a").mkdir()
    local = site_config(tmp_path / "a", cluster="shared", shard_size=2)
    record_everything(local)  # the local layout, before terraform.backend: pg
    raw = local.config.model_dump(mode="json")
    raw["terraform"]["backend"] = "pg"
    on_pg = Config.model_validate(raw)
    copied = migrate_documents(on_pg, ROOT)
    assert sorted(copied) == [
        "shared store shared/-/bootstrap.json",
        "shared store shared/-/breakers.json",
        "shared store shared/-/orphans/actions.json",
        "shared store shared/sim/desired/0",
        "shared store shared/sim/desired/2",
        "shared store shared/sim/lost-suspects/2",
    ]
    assert migrate_documents(on_pg, ROOT) == []  # a second run copies nothing
    successor = pg_site(tmp_path, "b").config
    shards = ProviderShards(successor, "sim", ROOT)
    assert shards.held() == {0: frozenset({"op1-000", "op1-001"}), 2: frozenset({"op2-000"})}
    documents = cluster_documents(successor)
    assert (
        Breakers.load(successor.state_dir, successor.policy.breaker, documents).state("cpu").position == Position.OPEN
    )


def test_with_pg_a_lost_cache_is_rebuilt_and_a_lost_record_is_refused_not_read_as_delete_all(
    tmp_path: Path, conn_str: str
) -> None:
    loaded, engine = pg_site(tmp_path, "a"), FakeEngine()
    plan_burst(loaded, {"cpu": 2}, out=tmp_path / "first", toolkit_root=ROOT, engine=engine)
    apply_bundle(loaded, tmp_path / "first", ROOT, wired=unit_ops(loaded, engine))
    shards = ProviderShards(loaded.config, "sim", ROOT)
    shard = shards.shard(0)
    shard.desired_file.unlink()  # only the cache: the next op rebuilds it from the store
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "second", toolkit_root=ROOT, engine=engine)
    apply_bundle(loaded, tmp_path / "second", ROOT, wired=unit_ops(loaded, engine))
    assert sorted(len(keys) for keys in shards.held().values()) == [1, 2]  # shard_size 2
    assert shard.desired_file.read_bytes() == shard.desired.record.read()

    store = store_for(loaded.config)
    assert store is not None
    store.remove_document("sim", "desired/0", None)  # the record itself is lost
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "third", toolkit_root=ROOT, engine=engine)
    with pytest.raises(FinalError, match=r"^shared store shared/sim/desired/0: missing, but the Terraform state"):
        apply_bundle(loaded, tmp_path / "third", ROOT, wired=unit_ops(loaded, engine))
    assert len(FakeEngine.state(shard.path)["instances"]) == 2


def test_a_daemons_status_shows_the_breakers_as_last_read_while_the_store_is_away(
    tmp_path: Path, conn_str: str, server: PgServer
) -> None:
    """Last in the module: it stops the module's server for a moment."""
    holder = pg_site(tmp_path, "a")
    record_everything(holder)
    publishing = StatusPublishing()
    publishing.config = holder.config
    assert publishing.shown_breakers().state("cpu").position == Position.OPEN
    server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            Breakers.load(holder.config.state_dir, holder.config.policy.breaker, cluster_documents(holder.config))
        # The status is still written (it is what says the store is away), the breaker as it was.
        shown = publishing.shown_breakers()
        assert [(s.template, s.position) for s in shown.states()] == [("cpu", Position.OPEN)]
    finally:
        server.start()
    assert publishing.shown_breakers().state("cpu").position == Position.OPEN
