"""Documents in the shared store: round trips, the epoch fence, clusters kept apart."""

from __future__ import annotations

import pytest

from orchestrator.clients.postgres import SharedStore
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch
from tests.unit.clients.postgres.pg_helpers import sql

OLD, NEW = Epoch(3, 9), Epoch(4, 1)


def test_documents_round_trip_as_bytes(store: SharedStore) -> None:
    body = bytes(range(256))  # any bytes, not only UTF-8 text
    store.write_document("p1", "desired/0", body, Epoch(1, 1))
    store.write_document("p1", "desired/1", b"", Epoch(1, 1))
    store.write_document("", "cluster-wide", b"{}", None)
    assert store.read_document("p1", "desired/0") == body
    assert store.read_document("p1", "desired/1") == b""
    assert store.read_document("", "cluster-wide") == b"{}"
    assert store.read_document("p1", "missing") is None
    assert store.read_document("p2", "desired/0") is None  # another provider's name space

    store.write_document("p1", "desired/0", b"second", Epoch(1, 1))
    assert store.read_document("p1", "desired/0") == b"second"


def test_read_documents_takes_the_names_under_a_prefix_literally(store: SharedStore) -> None:
    for name in ("desired/0", "desired/1", "desired_x", "desiredXY", "lost-suspects.json"):
        store.write_document("p1", name, name.encode(), None)
    store.write_document("p2", "desired/7", b"other provider", None)
    assert store.read_documents("p1", "desired/") == {"desired/0": b"desired/0", "desired/1": b"desired/1"}
    # LIKE's wildcards mean nothing in a prefix: "_" matches only "_".
    assert store.read_documents("p1", "desired_") == {"desired_x": b"desired_x"}
    assert store.read_documents("p1", "nothing/") == {}
    assert set(store.read_documents("p1", "")) == {
        "desired/0",
        "desired/1",
        "desired_x",
        "desiredXY",
        "lost-suspects.json",
    }


def test_remove_document(store: SharedStore) -> None:
    store.write_document("p1", "desired/0", b"x", Epoch(1, 1))
    store.remove_document("p1", "desired/0", Epoch(1, 1))
    assert store.read_document("p1", "desired/0") is None
    store.remove_document("p1", "desired/0", Epoch(1, 1))  # absent: nothing to do, no error


def test_a_write_of_an_older_epoch_is_refused_and_changes_nothing(store: SharedStore, conn_str: str) -> None:
    store.write_document("p1", "desired/0", b"successor's", NEW)
    before = sql(conn_str, "SELECT body, epoch, updated_at FROM xceprov.documents WHERE name = 'desired/0'")

    with pytest.raises(LeaseLost) as refused:
        store.write_document("p1", "desired/0", b"zombie's", OLD)
    assert "\n" not in str(refused.value)
    assert "provider p1" in str(refused.value) and "4.1" in str(refused.value) and "3.9" in str(refused.value)
    with pytest.raises(LeaseLost):
        store.write_document("p1", "new-name", b"zombie's", OLD)  # a new document is fenced too
    with pytest.raises(LeaseLost):
        store.remove_document("p1", "desired/0", OLD)

    assert sql(conn_str, "SELECT body, epoch, updated_at FROM xceprov.documents WHERE name = 'desired/0'") == before
    assert store.read_document("p1", "new-name") is None
    assert sql(conn_str, "SELECT term, seq FROM xceprov.fences WHERE provider = 'p1'") == [(4, 1)]


def test_the_same_or_a_newer_epoch_writes_and_raises_the_fence(store: SharedStore, conn_str: str) -> None:
    store.write_document("p1", "a", b"1", OLD)
    store.write_document("p1", "a", b"2", OLD)  # the holder writes again in its own epoch
    store.write_document("p1", "a", b"3", NEW)
    assert store.read_document("p1", "a") == b"3"
    assert sql(
        conn_str, "SELECT term, seq, epoch FROM xceprov.fences JOIN xceprov.documents USING (cluster, provider)"
    ) == [(4, 1, "4.1")]
    with pytest.raises(LeaseLost):
        store.write_document("p1", "a", b"4", OLD)
    assert store.read_document("p1", "a") == b"3"


def test_the_fence_is_per_provider(store: SharedStore) -> None:
    store.write_document("p1", "a", b"p1", NEW)
    store.write_document("p2", "a", b"p2", OLD)  # p2's lease is another lease
    assert store.read_document("p2", "a") == b"p2"


def test_no_epoch_skips_the_fence(store: SharedStore, conn_str: str) -> None:
    store.write_document("p1", "a", b"fenced", NEW)
    store.write_document("p1", "a", b"unfenced", None)
    assert store.read_document("p1", "a") == b"unfenced"
    assert sql(conn_str, "SELECT epoch FROM xceprov.documents WHERE name = 'a'") == [(None,)]
    assert sql(conn_str, "SELECT term, seq FROM xceprov.fences") == [(4, 1)]  # the fence stays where it was
    store.remove_document("p1", "a", None)
    assert store.read_document("p1", "a") is None


def test_clusters_sharing_a_database_never_see_each_other(store: SharedStore, conn_str: str) -> None:
    other = SharedStore.open(conn_str, "c2")
    try:
        store.write_document("p1", "desired/0", b"c1's", NEW)
        other.write_document("p1", "desired/0", b"c2's", OLD)  # c2's fence is its own
        assert store.read_document("p1", "desired/0") == b"c1's"
        assert other.read_document("p1", "desired/0") == b"c2's"
        assert other.read_documents("p1", "desired/") == {"desired/0": b"c2's"}
        other.remove_document("p1", "desired/0", OLD)
        assert store.read_document("p1", "desired/0") == b"c1's"
    finally:
        other.close()


def test_an_update_changes_the_body_as_it_is_and_a_failing_change_writes_nothing(store: SharedStore) -> None:
    assert store.update_document("", "records", lambda now: (now or b"") + b"a", None) == b"a"
    assert store.update_document("", "records", lambda now: (now or b"") + b"b", None) == b"ab"
    assert store.update_document("", "records", lambda now: None, None) == b"ab"  # None: left as it is

    def broken(now: bytes | None) -> bytes | None:
        raise ValueError("not a record file")

    with pytest.raises(ValueError, match="not a record file"):
        store.update_document("", "records", broken, None)
    assert store.read_document("", "records") == b"ab"


def test_an_update_of_an_older_epoch_is_refused_and_changes_nothing(store: SharedStore) -> None:
    store.write_document("p1", "desired/0", b"successor's", NEW)
    with pytest.raises(LeaseLost):
        store.update_document("p1", "desired/0", lambda now: b"zombie's", OLD)
    assert store.read_document("p1", "desired/0") == b"successor's"
