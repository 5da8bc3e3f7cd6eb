"""``commitFacts``: a batch of facts in one request, all or nothing (docs/protocol.md §6)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_controller_helpers import (
    ProtoClient,
    Running,
    client_cert,
    join_provisioner,
    join_worker,
    lease,
    running_controller,
)

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import LeaseGrant
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.facts import LinkFacts
from orchestrator.protocol.decode import DEFAULT_LIMITS
from orchestrator.protocol.schema import MAX_BATCH_FACTS
from orchestrator.sim.controller.store import ControllerStore, FactRecord

EpochT = tuple[int, int]


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl", max_frame_bytes=4 * 1024 * 1024) as rc:
        yield rc


def holder(ctl: Running, clients: list[ProtoClient]) -> tuple[ProtoClient, EpochT]:
    """A provisioner ``orch-a`` joined and holding the lease of ``sim``."""
    c = ctl.provisioner("orch-a")
    clients.append(c)
    assert join_provisioner(c, "orch-a", ["sim"]).kind == "joined"
    grant = lease(c, "leaseAcquire", "sim")
    assert grant.kind == "leaseGrant"
    return c, (grant.body["epoch"]["term"], grant.body["epoch"]["seq"])


def created(key: str, epoch: EpochT, **extra: Any) -> dict[str, Any]:
    """The fields of an ``instanceCreated`` fact of op ``op-1``."""
    return {"kind": "instanceCreated", "opId": "op-1", "instanceKey": key, "instanceId": f"i-{key}", **extra} | {
        "epoch": epoch
    }


def expected(key: str, epoch: EpochT, **extra: Any) -> dict[str, Any]:
    """The fields of an ``expectedHost`` fact of op ``op-1``."""
    fields = {"template": "cpu", "hostName": f"h-{key}", "joinDeadlineUnixMs": 4_000_000_000_000, **extra}
    return created(key, epoch, **fields) | {"kind": "expectedHost"}


def commit_batch(c: ProtoClient, facts: list[dict[str, Any]], provider: str = "sim") -> Any:
    """One ``commitFacts`` request."""

    def fill(env: Any) -> None:
        lst = env.init("commitFacts").init("facts", len(facts))
        for i, fields in enumerate(facts):
            f = lst[i]
            f.provider = provider
            for name, value in fields.items():
                if name == "epoch":
                    f.epoch.term, f.epoch.seq = value
                else:
                    setattr(f, name, value)

    return c.request(fill)


def stored(ctl: Running) -> list[tuple[str, str]]:
    return [(str(f.kind), f.instance_key) for f in ctl.store.facts("sim")]


def test_a_batch_is_committed_in_order_and_a_retry_duplicates_nothing(ctl: Running, clients: list[ProtoClient]) -> None:
    c, epoch = holder(ctl, clients)
    batch = [created("op-1-0", epoch), expected("op-1-0", epoch), created("op-1-1", epoch), expected("op-1-1", epoch)]
    reply = commit_batch(c, batch)
    assert reply.kind == "committed"
    answered = reply.body["facts"]
    assert [(f["kind"], f["instanceKey"]) for f in answered] == stored(ctl)
    ids = [f["factId"] for f in answered]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert {f["holder"] for f in answered} == {"orch-a"} and all(f["committedUnixMs"] > 0 for f in answered)
    # The expected-host facts made host records, as one commitFact each would.
    assert sorted(h.host_name for h in ctl.core.host_list("sim")) == ["h-op-1-0", "h-op-1-1"]
    # A client that lost the reply sends the batch again: the same records come back.
    again = commit_batch(c, batch)
    assert [f["factId"] for f in again.body["facts"]] == ids and len(stored(ctl)) == 4


def test_one_stale_or_invalid_fact_refuses_the_whole_batch(ctl: Running, clients: list[ProtoClient]) -> None:
    c, epoch = holder(ctl, clients)
    stale = (epoch[0], epoch[1] + 5)
    reply = commit_batch(c, [created("op-1-0", epoch), created("op-1-1", stale)])
    assert reply.kind == "reject" and reply.body["reason"] == "staleEpoch"
    assert reply.body["currentEpoch"] == {"term": epoch[0], "seq": epoch[1]}
    reply = commit_batch(c, [created("op-1-0", epoch), expected("op-1-1", epoch, template="")])
    assert reply.kind == "reject" and reply.body["reason"] == "invalid"
    assert "fact 1" in reply.body["message"] and "template" in reply.body["message"]
    assert stored(ctl) == [] and ctl.core.host_list("sim") == []


def test_a_batch_over_the_limit_gets_one_error_and_commits_nothing(ctl: Running, clients: list[ProtoClient]) -> None:
    # The limit stays within what every reader decodes (the reply lists as many facts).
    assert DEFAULT_LIMITS.max_list_length >= MAX_BATCH_FACTS
    c, epoch = holder(ctl, clients)
    batch = [created(f"op-1-{i}", epoch) for i in range(MAX_BATCH_FACTS + 1)]
    reply = commit_batch(c, batch)
    assert reply.kind == "error" and reply.body["code"] == "invalid"
    assert f"{MAX_BATCH_FACTS + 1} facts, more than {MAX_BATCH_FACTS}" in reply.body["message"]
    assert stored(ctl) == []
    # The connection stays open and serves the next request (exactly one reply came back).
    assert commit_batch(c, batch[:MAX_BATCH_FACTS]).kind == "committed"
    assert len(stored(ctl)) == MAX_BATCH_FACTS


def test_a_worker_cannot_commit_a_batch(ctl: Running, clients: list[ProtoClient]) -> None:
    _holder, epoch = holder(ctl, clients)
    w = ctl.anonymous()
    clients.append(w)
    assert join_worker(w, "h1", token=ctl.token("", "h1")).kind == "joined"
    reply = commit_batch(w, [created("op-1-0", epoch)])
    assert reply.kind == "error" and reply.body["code"] == "permissionDenied"
    assert stored(ctl) == []


def test_link_facts_commit_a_burst_in_batches_below_the_limit(ctl: Running, tmp_path: Path) -> None:
    cert, key = client_cert(ctl.state_dir, "provisioner", "orch-b")
    host, port = ctl.addr
    settings = ControllerSettings(addresses=[f"{host}:{port}"], ca=ctl.ca, client_cert=cert, client_key=key)
    with ControllerLink(settings, instance_id="orch-b", providers=["sim"]) as link:
        link.open()
        grant = link.acquire("sim")
        assert isinstance(grant, LeaseGrant)
        epoch = grant.epoch
        requests: list[int] = []
        send = link.request

        def counting(kind: str, body: Any = None, timeout: float | None = None) -> Any:
            requests.append(len(body["facts"]) if kind == "commitFacts" else 0)
            return send(kind, body, timeout)

        link.request = counting  # type: ignore[method-assign]
        n = MAX_BATCH_FACTS + 200
        facts = [
            Fact(FactKind.INSTANCE_CREATED, "sim", "op-9", epoch, instance_key=f"op-9-{i:04d}", instance_id=f"i-{i}")
            for i in range(n)
        ]
        LinkFacts(link).commit_many(facts)
        assert requests == [MAX_BATCH_FACTS, 200]  # one round trip per batch, none per fact
        assert [f.instance_key for f in LinkFacts(link).facts("sim")] == [f.instance_key for f in facts]
        # The link's cache holds the committed facts with the controller's ids.
        assert len({f.fact_id for f in link.facts("sim")}) == n


def test_the_store_writes_a_batch_in_one_transaction_or_not_at_all(tmp_path: Path) -> None:
    store = ControllerStore(tmp_path / "store")
    try:
        good = FactRecord(FactKind.INSTANCE_CREATED, "sim", "op-1", 1, 1, instance_key="op-1-0")
        broken = FactRecord(FactKind.INSTANCE_CREATED, "sim", None, 1, 1, instance_key="op-1-1")  # type: ignore[arg-type]
        with pytest.raises(sqlite3.IntegrityError):
            store.commit_facts([good, broken])  # the second insert fails after the first one
        assert store.facts("sim") == []  # the first was rolled back with it
        [(committed, new)] = store.commit_facts([good])
        assert new and store.facts("sim") == [committed]
    finally:
        store.close()
