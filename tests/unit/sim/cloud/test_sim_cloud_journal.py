"""The simulated cloud's mutation journal: what the store records, and the check that epochs
never interleave per provider (``tests/mutation_journal.py``). The provider's fence is tested in
``test_sim_cloud_provider.py``, the CLI in ``test_sim_cloud_cli.py``."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from orchestrator.sim.cloud.store import CloudStore, Mutation

# --import-mode=importlib: the journal check lives in tests/, beside the other shared helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from mutation_journal import assert_epochs_never_interleave, epoch_order, interleavings

OWNER = {"xce:cluster": "demo", "xce:provider": "sim", "xce:max_lifetime": "60"}


def _journal(store: CloudStore) -> list[tuple[str, str, str, str, str]]:
    return [(m.provider, m.action, m.client_token, m.epoch, m.reason) for m in store.mutations()]


def test_every_change_is_journalled_once_with_its_epoch(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = CloudStore(tmp_path / "cloud.sqlite", clock=lambda: now[0])
    a = store.create_instance("a", "c8.large", "debian-12", OWNER, "", "op1-0", epoch="3.7")
    # A retry with the same token returns the instance: no second launch, no second entry.
    assert store.create_instance("a", "c8.large", "debian-12", OWNER, "", "op1-0", epoch="3.7").id == a.id
    store.update_tags(a.id, {**OWNER, "site": "x"}, epoch="3.8")
    store.stop(a.id, epoch="3.8")
    store.stop(a.id, epoch="3.8")  # already stopped: nothing changed
    store.start(a.id)
    assert store.delete(a.id, epoch="4.1")
    assert not store.delete(a.id, epoch="4.1")  # already gone: nothing changed
    b = store.create_instance("b", "c8.large", "debian-12", OWNER, "", "op2-0", epoch="4.1")
    store.spot_reclaim(instance_id=b.id)
    c = store.create_out_of_band("stray", "c8.large", "debian-12", {"xce:provider": "other"})
    store.delete_out_of_band(c.id)
    d = store.create_instance("d", "c8.large", "debian-12", OWNER, "", "op3-0", epoch="4.2")
    now[0] += 61  # d's lifetime ends: the cloud terminates it at the next operation
    store.list_instances()
    assert store.get(d.id) is not None and store.get(d.id).state == "terminated"  # type: ignore[union-attr]
    assert _journal(store) == [
        ("sim", "create", "op1-0", "3.7", ""),
        ("sim", "update-tags", "op1-0", "3.8", ""),
        ("sim", "stop", "op1-0", "3.8", ""),
        ("sim", "start", "op1-0", "", ""),
        ("sim", "delete", "op1-0", "4.1", "user-terminate"),
        ("sim", "create", "op2-0", "4.1", ""),
        ("sim", "delete", "op2-0", "", "spot-reclaim"),
        ("other", "create", "", "", ""),
        ("other", "delete", "", "", "out-of-band-delete"),
        ("sim", "create", "op3-0", "4.2", ""),
        ("sim", "delete", "op3-0", "", "expired"),
    ]
    seqs = [m.seq for m in store.mutations()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [m.client_token for m in store.mutations(since=seqs[-2])] == ["op3-0"]
    assert {m.provider for m in store.mutations(provider="other")} == {"other"}
    assert all(m.cluster in ("demo", "") for m in store.mutations())


def test_a_failed_change_leaves_no_entry(tmp_path: Path) -> None:
    store = CloudStore(tmp_path / "cloud.sqlite")
    store.set_capacity("c8.large", 0)
    with pytest.raises(Exception, match="InsufficientCapacity"):
        store.create_instance("a", "c8.large", "debian-12", OWNER, "", "op1-0", epoch="3.7")
    with pytest.raises(Exception, match="InvalidParameterValue"):
        store.create_instance("a", "g4", "debian-12", {"xce:max_lifetime": "7d"}, "", "op1-0", epoch="3.7")
    assert store.mutations() == []


def test_a_store_of_schema_3_gains_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    store = CloudStore(path)
    a = store.create_instance("a", "c8.large", "debian-12", OWNER, "", "op1-0")
    store.close()
    with sqlite3.connect(path) as conn:  # what a store made before the journal looked like
        conn.execute("DROP TABLE mutations")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    reopened = CloudStore(path)
    reopened.delete(a.id, epoch="1.2")
    assert _journal(reopened) == [("sim", "delete", "op1-0", "1.2", "user-terminate")]


def _m(seq: int, epoch: str, provider: str = "sim", action: str = "create") -> Mutation:
    return Mutation(seq, 0.0, "demo", provider, action, f"i-{seq}", f"op-{seq}", epoch)


def test_epochs_that_only_move_forward_pass() -> None:
    journal = [
        _m(1, "3.7"),
        _m(2, "3.7", action="delete"),
        _m(3, "", action="delete"),  # the cloud's own: no holder's
        _m(4, "3.9"),
        _m(5, "1.2", provider="other"),  # another provider has its own order
        _m(6, "none"),  # standalone: no order
        _m(7, "4.0"),
        _m(8, "10.1"),  # compared as numbers, not as text
    ]
    assert interleavings(journal) == []
    assert epoch_order("10.1") == (10, 1) and epoch_order("none") is None and epoch_order("") is None


def test_an_older_epoch_after_a_newer_one_fails_the_check() -> None:
    journal = [_m(1, "3.7"), _m(2, "3.9", provider="sim"), _m(3, "3.8", action="delete"), _m(4, "3.9")]
    assert interleavings(journal) == [
        "provider 'sim' (cluster 'demo'): #3 delete op-3 under epoch 3.8 after #2 create under the newer epoch 3.9"
    ]
    # The same pairs in another term order: a term always outranks a sequence.
    assert interleavings([_m(1, "4.1"), _m(2, "3.99")]) != []
    assert interleavings([_m(1, "3.99"), _m(2, "4.1")]) == []


def test_the_store_check_names_the_interleaving(tmp_path: Path) -> None:
    store = CloudStore(tmp_path / "cloud.sqlite")
    a = store.create_instance("a", "c8.large", "debian-12", OWNER, "", "op1-0", epoch="5.2")
    store.create_instance("b", "c8.large", "debian-12", OWNER, "", "op2-0", epoch="5.3")
    assert len(assert_epochs_never_interleave(store.path)) == 2
    store.delete(a.id, epoch="5.2")  # the old holder, still mutating after its successor
    with pytest.raises(AssertionError, match=r"#3 delete op1-0 under epoch 5.2 after #2 create under the newer"):
        assert_epochs_never_interleave(store.path)
