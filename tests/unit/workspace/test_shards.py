"""Shards: bounded placement, durable and deterministic on resume, shard 0 is the old layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, site_config

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model.config import SHARD_SIZE
from orchestrator.model.instances import InstanceSpec, instance_key
from orchestrator.workspace.shards import ProviderShards, ShardWorkdir, listing_dir
from orchestrator.workspace.terraform import prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


def shards_of(tmp_path: Path, shard_size: int = 4) -> ProviderShards:
    loaded = site_config(tmp_path)
    config = loaded.config.model_copy(
        update={"providers": {"sim": loaded.config.providers["sim"].model_copy(update={"shard_size": shard_size})}}
    )
    return ProviderShards(config, "sim", ROOT)


def keys(op_id: str, n: int) -> list[str]:
    return [instance_key(op_id, i) for i in range(n)]


def spec(key: str) -> InstanceSpec:
    return InstanceSpec(name=key, template="cpu", flavor="c8.large", image="debian-12", tags={})


def write(shards: ProviderShards, placement: dict[ProviderWorkdir, list[str]]) -> None:
    """What the executor does after placing: each shard's desired set grows by its keys."""
    for shard, new in placement.items():
        current = shard.desired.read()
        current.update({key: spec(key) for key in new})
        shard.parent_dir()
        shard.desired.write(shard.variables(current, {}))


def sizes(placement: dict[ProviderWorkdir, list[str]]) -> dict[int, int]:
    return {shard.index: len(k) for shard, k in placement.items() if isinstance(shard, ShardWorkdir)}


def test_shard_zero_is_the_single_directory_layout_with_its_lock(tmp_path: Path) -> None:
    shards = shards_of(tmp_path)
    old = ProviderWorkdir(shards.config, "sim", ROOT)
    (zero,) = shards.all()
    assert zero.path == old.path and zero.desired_file == old.desired_file
    assert zero.lock().lock_file == old.lock().lock_file
    one = shards.shard(1)
    assert one.path == old.path / "shards" / "1" and one.lock().lock_file != old.lock().lock_file


def test_an_existing_working_directory_with_state_becomes_shard_zero_untouched(tmp_path: Path) -> None:
    old = ProviderWorkdir(shards_of(tmp_path).config, "sim", ROOT)
    prepared_workdir(FakeEngine(), old)
    (old.path / "terraform.tfstate").write_text('{"serial": 7}')
    legacy = keys("op-00000001-aaaaaa", 6)  # more than a shard holds: it was made before shards
    old.desired.write(old.variables({k: spec(k) for k in legacy}, {}))
    before = {p.relative_to(old.path): p.read_bytes() for p in old.path.rglob("*") if p.is_file()}

    shards = shards_of(tmp_path, shard_size=4)
    assert shards.holding(legacy[0]) == shards.shard(0)
    placement = shards.place("op-00000002-bbbbbb", keys("op-00000002-bbbbbb", 3))
    # The over-full shard 0 keeps what it has and takes nothing new.
    assert sizes(placement) == {1: 3}
    after = {p.relative_to(old.path): p.read_bytes() for p in old.path.rglob("*") if p.is_file()}
    assert after == before


def test_a_burst_fills_shards_to_their_bound_and_opens_new_ones(tmp_path: Path) -> None:
    shards = shards_of(tmp_path, shard_size=4)
    burst = keys("op-00000001-aaaaaa", 10)
    placement = shards.place("op-00000001-aaaaaa", burst)
    assert sizes(placement) == {0: 4, 1: 4, 2: 2}
    assert [k for part in placement.values() for k in part] == burst  # every key once, in order
    write(shards, placement)
    assert [s.index for s in shards.all() if isinstance(s, ShardWorkdir)] == [0, 1, 2]
    assert all(len(shards.keys(s)) <= 4 for s in shards.all())


def test_a_new_op_goes_to_the_least_full_shard_and_spans_when_larger_than_its_room(tmp_path: Path) -> None:
    shards = shards_of(tmp_path, shard_size=4)
    write(shards, shards.place("op-00000001-aaaaaa", keys("op-00000001-aaaaaa", 7)))  # 4 + 3
    write(shards, shards.place("op-00000002-bbbbbb", keys("op-00000002-bbbbbb", 1)))  # fills shard 1
    first = shards.place("op-00000003-cccccc", keys("op-00000003-cccccc", 2))
    assert sizes(first) == {2: 2}  # every shard full: a new one
    write(shards, first)
    # Return two instances of shard 0: it becomes the least full.
    zero = shards.shard(0)
    kept = {k: v for k, v in zero.desired.read().items() if not k.endswith(("-000", "-001"))}
    zero.desired.write(zero.variables(kept, {}))
    spanning = shards.place("op-00000004-dddddd", keys("op-00000004-dddddd", 5))
    assert sizes(spanning) == {0: 2, 2: 2, 3: 1}
    assert list(spanning) == sorted(spanning, key=lambda s: s.index if isinstance(s, ShardWorkdir) else 0)


def test_a_resumed_op_keeps_every_written_key_where_it_was(tmp_path: Path) -> None:
    shards = shards_of(tmp_path, shard_size=4)
    write(shards, shards.place("op-00000001-aaaaaa", keys("op-00000001-aaaaaa", 2)))
    op = "op-00000002-bbbbbb"
    planned = shards.place(op, keys(op, 6))
    assert shards.place(op, keys(op, 6)) == planned  # nothing written yet: the same answer
    # A crash after the first shard's desired set was written, before the second's.
    first, *_ = planned.items()
    write(shards, dict([first]))
    resumed = ProviderShards(shards.config, "sim", ROOT)  # a new process
    again = resumed.place(op, keys(op, 6))
    assert {s.path: k for s, k in again.items()} == {s.path: k for s, k in planned.items()}
    assert all(resumed.holding(k) == first[0] for k in first[1])
    write(resumed, {s: [k for k in ks if resumed.holding(k) is None] for s, ks in again.items()})
    assert resumed.place(op, keys(op, 6)) == again  # fully written: still the same, no key moves


def test_holding_follows_the_desired_sets_and_unknown_keys_are_held_nowhere(tmp_path: Path) -> None:
    shards = shards_of(tmp_path, shard_size=2)
    write(shards, shards.place("op-00000001-aaaaaa", keys("op-00000001-aaaaaa", 3)))
    assert shards.holding(instance_key("op-00000001-aaaaaa", 2)) == shards.shard(1)
    assert shards.holding("op-00000009-ffffff-000") is None
    one = shards.shard(1)
    one.desired.write(one.variables({}, {}))  # the instance was returned
    assert shards.holding(instance_key("op-00000001-aaaaaa", 2)) is None


def test_shards_build_and_initialise_like_any_working_directory(tmp_path: Path) -> None:
    shards = shards_of(tmp_path, shard_size=2)
    placement = shards.place("op-00000001-aaaaaa", keys("op-00000001-aaaaaa", 4))
    engine = FakeEngine()
    # Shard 1 first: shard 0 is then built into the directory that already holds shards/.
    for shard in reversed(list(placement)):
        assert prepared_workdir(engine, shard) == shard.path
        assert (shard.path / "main.tf").is_file() and shard.is_current()
    # Shard 0's copy of the sources left shard 1 alone, and no staging copy is left behind.
    assert (shards.base / "shards" / "1" / ".terraform").is_dir()
    assert sorted(p.name for p in (shards.base / "shards").iterdir()) == ["1", "1.lock"]
    assert not [p for p in shards.base.parent.iterdir() if "staging" in p.name]


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        shards_of(tmp_path).place("op-00000001-aaaaaa", ["op-00000001-aaaaaa-000"] * 2)


def test_shard_size_is_a_documented_provider_key_with_a_bound(tmp_path: Path) -> None:
    assert site_config(tmp_path).config.providers["sim"].shard_size == SHARD_SIZE
    text = f"""
cluster: unit
state_dir: {tmp_path / "state"}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim, shard_size: 0}}
templates:
  cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}
"""
    with pytest.raises(ConfigError, match=r"providers\.sim\.shard_size"):
        parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def test_only_numbered_shard_directories_count_and_the_listing_is_read_from_shard_zero(tmp_path: Path) -> None:
    shards = shards_of(tmp_path)
    under = shards.base / "shards"
    for name in ("2", ".sim.staging-x1", "0", "07", "notes"):
        (under / name).mkdir(parents=True)
    (under / "9.lock").write_text("")  # a lock file beside a shard, not a shard
    assert [s.index for s in shards.all() if isinstance(s, ShardWorkdir)] == [0, 2]
    assert shards.listing_shard() == shards.shard(0)
    # A new shard opens after the highest one on disk, never in a gap.
    assert sizes(shards.place("op-00000001-aaaaaa", keys("op-00000001-aaaaaa", 9))) == {0: 4, 2: 4, 3: 1}


def test_only_shard_zero_keeps_the_listing_in_its_variables(tmp_path: Path) -> None:
    shards = shards_of(tmp_path)
    instances = {key: spec(key) for key in keys("op-a", 2)}
    settings = {"store": "cloud.sqlite"}
    assert shards.shard(0).variables(instances, settings)["settings"] == settings
    later = shards.shard(3).variables(instances, settings)
    assert later["settings"] == {"store": "cloud.sqlite", "list_tagged": False}
    assert sorted(later["instances"]) == sorted(instances)
    # Where a shard's host-loss check reads the cloud's reasons: shard 0's listing.
    assert listing_dir(shards.shard(3).path) == shards.base
    assert listing_dir(shards.base) == shards.base


def test_parallel_states_defaults_to_two_and_refuses_zero(tmp_path: Path) -> None:
    assert site_config(tmp_path).config.terraform.parallel_states == 2
    with pytest.raises(ConfigError, match=r"terraform\.parallel_states"):
        site_config(tmp_path, parallel_states=0)
