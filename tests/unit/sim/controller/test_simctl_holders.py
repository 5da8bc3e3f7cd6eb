"""Lease holders are process instances: two processes presenting one certificate are two holders
(docs/protocol.md §5 and "Authentication and roles"), so a command run beside the daemon can
neither take, use nor release the daemon's lease."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_controller_helpers import ProtoClient, Running, commit, join_provisioner, lease, running_controller


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl") as rc:
        yield rc


def _joined(ctl: Running, clients: list[ProtoClient], instance: str) -> ProtoClient:
    c = ctl.provisioner("orch-a")  # every connection presents the same certificate
    clients.append(c)
    assert join_provisioner(c, "orch-a-label", ["sim"], lease_instance=instance).kind == "joined"
    return c


def _epoch(reply: Any) -> tuple[int, int]:
    return reply.body["epoch"]["term"], reply.body["epoch"]["seq"]


def test_a_second_process_of_the_same_certificate_is_refused_the_lease_naming_the_holder(
    ctl: Running, clients: list[ProtoClient]
) -> None:
    daemon = _joined(ctl, clients, "daemon.41.aaaa")
    keeper = _joined(ctl, clients, "daemon.41.aaaa")  # the daemon's lease keeper: the same process instance
    command = _joined(ctl, clients, "cli.42.bbbb")

    grant = lease(keeper, "leaseAcquire", "sim")
    assert grant.kind == "leaseGrant" and grant.body["holder"] == "orch-a/daemon.41.aaaa"
    denied = lease(command, "leaseAcquire", "sim")
    assert denied.kind == "leaseDeny" and denied.body["reason"] == "held"
    assert denied.body["holder"] == "orch-a/daemon.41.aaaa" and denied.body["retryAfterMs"] > 0

    # The command cannot use the daemon's epoch either: renew, commit, release are all refused ...
    assert lease(command, "leaseRenew", "sim", _epoch(grant)).body["reason"] == "notHolder"
    reject = commit(command, "sim", _epoch(grant))
    assert reject.kind == "reject" and reject.body["reason"] == "staleEpoch"
    released = lease(command, "leaseRelease", "sim", _epoch(grant))
    assert released.kind == "leaseDeny" and released.body["reason"] == "notHolder"
    # ... and the daemon keeps its lease and epoch: no new grant, no new seq.
    assert ctl.core.valid_holder("sim") == ("orch-a/daemon.41.aaaa", _epoch(grant))
    again = lease(keeper, "leaseAcquire", "sim")
    assert _epoch(again) == _epoch(grant)

    # The daemon's main link (another connection of its process) commits under the keeper's lease.
    assert commit(daemon, "sim", _epoch(grant)).kind == "ack"
    facts = daemon.request(lambda env: setattr(env.init("queryFacts"), "provider", "sim")).body["facts"]
    assert [f["holder"] for f in facts] == ["orch-a/daemon.41.aaaa"]


def test_after_the_holder_releases_the_other_process_gets_a_new_epoch(ctl: Running, clients: list[ProtoClient]) -> None:
    first = _joined(ctl, clients, "daemon.41.aaaa")
    second = _joined(ctl, clients, "cli.42.bbbb")
    grant = lease(first, "leaseAcquire", "sim")
    assert lease(first, "leaseRelease", "sim", _epoch(grant)).kind == "ok"
    taken = lease(second, "leaseAcquire", "sim")
    assert taken.kind == "leaseGrant" and taken.body["holder"] == "orch-a/cli.42.bbbb"
    assert _epoch(taken) > _epoch(grant)


def test_a_legacy_join_is_its_own_holder_beside_a_process_instance(ctl: Running, clients: list[ProtoClient]) -> None:
    legacy = _joined(ctl, clients, "")
    grant = lease(legacy, "leaseAcquire", "sim")
    assert grant.body["holder"] == "orch-a"  # as before this field: the identity alone
    newer = _joined(ctl, clients, "cli.42.bbbb")
    assert lease(newer, "leaseAcquire", "sim").body["holder"] == "orch-a"


@pytest.mark.parametrize("instance", ["a/b", "line\nbreak", "-leading", "x" * 129])
def test_a_join_with_a_malformed_instance_is_refused(ctl: Running, clients: list[ProtoClient], instance: str) -> None:
    c = ctl.provisioner("orch-a")
    clients.append(c)
    reply = join_provisioner(c, "orch-a", ["sim"], lease_instance=instance)
    assert reply.kind == "error" and reply.body["code"] == "invalid", reply
    assert "leaseInstance" in reply.body["message"]
    # Not joined: nothing can be asked on it.
    assert lease(c, "leaseAcquire", "sim").body["code"] == "notJoined"
