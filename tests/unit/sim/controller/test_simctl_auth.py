"""Authenticated roles: certificates name provisioners and admins, join tokens name workers, and
each role may send only its own requests (docs/protocol.md, "Authentication and roles")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_controller_helpers import (
    ProtoClient,
    Running,
    commit,
    join_provisioner,
    join_worker,
    lease,
    running_controller,
)


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl") as rc:
        yield rc


def _keep(clients: list[ProtoClient], c: ProtoClient) -> ProtoClient:
    clients.append(c)
    return c


def _epoch(reply: Any) -> tuple[int, int]:
    return reply.body["epoch"]["term"], reply.body["epoch"]["seq"]


def _code(reply: Any) -> str:
    assert reply.kind == "error", reply
    return str(reply.body["code"])


def test_without_a_certificate_no_lease_can_be_taken_or_renewed(ctl: Running, clients: list[ProtoClient]) -> None:
    holder = _keep(clients, ctl.provisioner("orch-a"))
    assert join_provisioner(holder, "orch-a", ["sim"]).kind == "joined"
    grant = lease(holder, "leaseAcquire", "sim")
    assert grant.kind == "leaseGrant" and grant.body["holder"] == "orch-a"

    intruder = _keep(clients, ctl.anonymous())
    assert _code(join_provisioner(intruder, "orch-a", ["sim"])) == "permissionDenied"  # claims the holder's name
    assert _code(lease(intruder, "leaseAcquire", "sim")) == "notJoined"
    assert _code(lease(intruder, "leaseRenew", "sim", _epoch(grant))) == "notJoined"
    assert _code(lease(intruder, "leaseRelease", "sim", _epoch(grant))) == "notJoined"
    assert _code(commit(intruder, "sim", _epoch(grant))) == "notJoined"
    assert ctl.core.valid_holder("sim") == ("orch-a", _epoch(grant))  # untouched


def test_the_holder_is_the_certificate_identity_not_the_instance_id(ctl: Running, clients: list[ProtoClient]) -> None:
    a = _keep(clients, ctl.provisioner("orch-a"))
    join_provisioner(a, "orch-a", ["sim"])
    grant = lease(a, "leaseAcquire", "sim")
    # Another provisioner certificate that says it is orch-a is still orch-b.
    b = _keep(clients, ctl.provisioner("orch-b"))
    assert join_provisioner(b, "orch-a", ["sim"]).kind == "joined"
    assert lease(b, "leaseRenew", "sim", _epoch(grant)).body["reason"] == "notHolder"
    assert lease(b, "leaseRelease", "sim", _epoch(grant)).body["reason"] == "notHolder"
    reject = commit(b, "sim", _epoch(grant))
    assert reject.kind == "reject" and reject.body["reason"] == "staleEpoch"
    ack = commit(a, "sim", _epoch(grant))
    assert ack.kind == "ack"
    facts = a.request(lambda env: setattr(env.init("queryFacts"), "provider", "sim")).body["facts"]
    assert [f["holder"] for f in facts] == ["orch-a"]


def test_a_provisioner_certificate_cannot_join_as_a_worker(ctl: Running, clients: list[ProtoClient]) -> None:
    p = _keep(clients, ctl.provisioner("orch-a"))
    r = join_worker(p, "h1", token=ctl.token("", "h1"))
    assert _code(r) == "permissionDenied"
    admin = _keep(clients, ctl.admin())
    assert _code(join_worker(admin, "h1", token=ctl.token("", "h1"))) == "invalid"  # already the admin role


def test_a_worker_cannot_take_a_lease_commit_or_administer(ctl: Running, clients: list[ProtoClient]) -> None:
    w = _keep(clients, ctl.anonymous())
    assert join_worker(w, "h1", token=ctl.token("", "h1")).kind == "joined"
    assert _code(lease(w, "leaseAcquire", "sim")) == "permissionDenied"
    assert _code(commit(w, "sim", (1, 1))) == "permissionDenied"
    assert _code(w.request(lambda env: setattr(env, "queryStatus", None))) == "permissionDenied"
    assert _code(w.request(lambda env: setattr(env, "adminFailover", None))) == "permissionDenied"
    assert w.request(lambda env: setattr(env.init("heartbeat"), "hostName", "h1")).kind == "ok"
    p = _keep(clients, ctl.provisioner("orch-a"))
    join_provisioner(p, "orch-a", ["sim"])
    assert _code(p.request(lambda env: setattr(env.init("heartbeat"), "hostName", "h1"))) == "permissionDenied"
    assert _code(p.request(lambda env: setattr(env, "adminFailover", None))) == "permissionDenied"


def test_worker_credentials_missing_or_of_another_host_are_refused(ctl: Running, clients: list[ProtoClient]) -> None:
    p = _keep(clients, ctl.provisioner("orch-a"))
    join_provisioner(p, "orch-a", ["sim"])
    ep = _epoch(lease(p, "leaseAcquire", "sim"))
    for i in (0, 1):
        r = commit(
            p, "sim", ep, kind="expectedHost", opId="op-1", instanceId=f"i-{i}", instanceKey=f"op-1-{i}",
            hostName=f"op-1-{i}", template="cpu", joinDeadlineUnixMs=int((time.time() + 600) * 1000),
        )  # fmt: skip
        assert r.kind == "ack"
    a_token = ctl.token("op-1-0", "op-1-0")
    tries = {
        "no token": ({"token": ""}, "tokenMissing"),
        "a's token, b's name": ({"token": a_token, "instance_key": "op-1-1", "name": "op-1-1"}, "tokenInvalid"),
        "a's token and key, b's name": (
            {"token": a_token, "instance_key": "op-1-0", "name": "op-1-1"},
            "tokenInvalid",
        ),
        "a v1 token": ({"token": "0" * 64, "instance_key": "op-1-1", "name": "op-1-1"}, "tokenVersion"),
        "garbage": ({"token": "v2.x." + "0" * 64, "instance_key": "op-1-1", "name": "op-1-1"}, "tokenMalformed"),
    }
    for what, (t, reason) in tries.items():
        w = _keep(clients, ctl.anonymous())
        r = join_worker(w, str(t.get("name", "op-1-1")), "i-1", token=str(t["token"]),
                        instance_key=str(t.get("instance_key", "op-1-1")))  # fmt: skip
        assert _code(r) == "refused", what
        assert r.body["message"].startswith(f"{reason}: host "), (what, r.body["message"])
    # a's own credential with b's instance id does not attach it to b's record
    w = _keep(clients, ctl.anonymous())
    r = join_worker(w, "op-1-0", "i-1", token=a_token, instance_key="op-1-0")
    assert r.kind == "joined"
    hosts = {h["instanceKey"]: h for h in p.request(lambda env: setattr(env.init("hostStatus"), "provider", "sim"))
             .body["hosts"]}  # fmt: skip
    assert hosts["op-1-0"]["state"] == "idle" and hosts["op-1-0"]["instanceId"] == "i-0"
    assert hosts["op-1-1"]["state"] == "expected"
    # b with its own credential joins
    wb = _keep(clients, ctl.anonymous())
    assert join_worker(wb, "op-1-1", "i-1", token=ctl.token("op-1-1", "op-1-1"), instance_key="op-1-1").kind == "joined"


def test_admin_requests_need_the_admin_identity(ctl: Running, clients: list[ProtoClient]) -> None:
    admin = _keep(clients, ctl.admin("ops"))
    r = admin.request(lambda env: setattr(env.init("adminSubmit"), "template", "cpu") or setattr(
        env.adminSubmit, "hosts", 1))  # fmt: skip
    assert r.kind == "adminReply"
    assert admin.request(lambda env: setattr(env, "queryStatus", None)).kind == "status"
    assert _code(lease(admin, "leaseAcquire", "sim")) == "permissionDenied"
    anonymous = _keep(clients, ctl.anonymous())
    assert _code(anonymous.request(lambda env: setattr(env, "adminFailover", None))) == "permissionDenied"
    term = ctl.core.term
    assert admin.request(lambda env: setattr(env, "adminFailover", None)).kind == "adminReply"
    assert ctl.core.term == term + 1
