"""The standalone fact journal in the shared store: batches, numbering, reading by sequence."""

from __future__ import annotations

import threading

import pytest

from orchestrator.clients.postgres import SharedStore
from orchestrator.errors import FinalError
from tests.unit.clients.postgres.pg_helpers import sql


def test_batches_are_numbered_on_and_read_in_order(store: SharedStore) -> None:
    assert store.facts_since(0) == []
    store.append_facts([{"kind": "requestIntent", "op": "a"}, {"kind": "instanceCreated", "op": "a", "n": 1}])
    store.append_facts([])  # nothing to append: no row, no number used
    store.append_facts([{"kind": "returned", "detail": "nul \x00 and ünïcode"}])
    assert store.facts_since(0) == [
        (1, {"kind": "requestIntent", "op": "a"}),
        (2, {"kind": "instanceCreated", "op": "a", "n": 1}),
        (3, {"kind": "returned", "detail": "nul \x00 and ünïcode"}),
    ]
    assert [seq for seq, _ in store.facts_since(2)] == [3]
    assert store.facts_since(3) == []


def test_a_batch_is_appended_whole_or_not_at_all(store: SharedStore, conn_str: str) -> None:
    store.append_facts([{"n": 1}])
    # The server refuses one row of the next batch (a trigger stands in for any row-level refusal).
    sql(
        conn_str,
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.body->>'n' = '3' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$",
    )
    sql(conn_str, "CREATE TRIGGER refuse BEFORE INSERT ON xceprov.facts FOR EACH ROW EXECUTE FUNCTION refuse()")
    with pytest.raises(FinalError, match="refused"):
        store.append_facts([{"n": 2}, {"n": 3}, {"n": 4}])
    assert store.facts_since(0) == [(1, {"n": 1})]
    store.append_facts([{"n": 5}])
    assert store.facts_since(0) == [(1, {"n": 1}), (2, {"n": 5})]


def test_appenders_at_once_get_distinct_numbers_without_gaps(store: SharedStore, conn_str: str) -> None:
    stores = [SharedStore.open(conn_str, "c1") for _ in range(4)]
    start = threading.Barrier(len(stores))

    def append(index: int) -> None:
        start.wait()
        for batch in range(5):
            stores[index].append_facts([{"writer": index, "batch": batch, "i": i} for i in range(3)])

    threads = [threading.Thread(target=append, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for opened in stores:
        opened.close()

    facts = store.facts_since(0)
    assert [seq for seq, _ in facts] == list(range(1, 61))
    for writer in range(4):  # each writer's facts in its own order, each batch contiguous
        mine = [(seq, f["batch"], f["i"]) for seq, f in facts if f["writer"] == writer]
        assert [(b, i) for _, b, i in mine] == [(b, i) for b in range(5) for i in range(3)]
        for b in range(5):
            seqs = [seq for seq, batch, _ in mine if batch == b]
            assert seqs == list(range(seqs[0], seqs[0] + 3))


def test_each_cluster_has_its_own_journal(store: SharedStore, conn_str: str) -> None:
    other = SharedStore.open(conn_str, "c2")
    try:
        store.append_facts([{"cluster": "c1"}])
        other.append_facts([{"cluster": "c2"}, {"cluster": "c2", "n": 2}])
        assert store.facts_since(0) == [(1, {"cluster": "c1"})]
        assert other.facts_since(0) == [(1, {"cluster": "c2"}), (2, {"cluster": "c2", "n": 2})]
    finally:
        other.close()
