"""A lease holder is one process: the link joins with its process's instance, the lease keeper is
handed its parent's, and a command never acts under (or releases) a lease granted to the identity
alone by a controller that does not tell processes apart (docs/protocol.md §5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ctlfake import FakeConn, FakeController, Pki

from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.configfile import parse_config
from orchestrator.errors import LeaseHeld
from orchestrator.model.config import ControllerSettings
from orchestrator.paths import toolkit_root
from orchestrator.protocol.holder import INSTANCE_PATTERN, process_instance
from orchestrator.services.ops import fenced_session


def _joins(fake: FakeController) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def joined(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        seen.append(dict(payload))
        return fake.default(member, payload, conn)

    fake.handlers["joinProvisioner"] = joined
    return seen


def test_the_links_of_one_process_join_as_one_instance_and_another_process_as_another(
    fake: FakeController, pki: Pki
) -> None:
    joins = _joins(fake)
    settings = ControllerSettings(addresses=[fake.address], ca=pki.ca, connect_timeout=2.0, request_timeout=2.0)
    for _ in range(2):
        with ControllerLink(settings, instance_id="c1-daemon-m1") as link:
            link.open()
    mine = process_instance("c1-daemon-m1")
    assert [j["leaseInstance"] for j in joins] == [mine, mine]
    assert INSTANCE_PATTERN.fullmatch(mine) and mine.startswith("c1-daemon-m1.")
    # The keeper child is handed the parent's instance (it would make its own otherwise).
    assert LeaseKeeper(settings, instance_id="c1-daemon-m1", providers=["p1"]).lease_instance == mine
    code = "from orchestrator.protocol.holder import process_instance as p; print(p('c1-daemon-m1'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other.startswith("c1-daemon-m1.") and other != mine
    assert process_instance("bad label/with\nnewline").startswith("bad-label-with-newline.")


def test_a_command_refuses_a_lease_granted_to_the_identity_alone_and_does_not_release_it(
    fake: FakeController, pki: Pki, tmp_path: Path
) -> None:
    # A controller that knows no leaseInstance grants to "me" (the identity alone), which may be
    # the lease a daemon of the same certificate holds.
    fake.handlers["leaseAcquire"] = lambda member, payload, conn: (
        "leaseGrant",
        {"provider": payload["provider"], "epoch": {"term": 1, "seq": 1}, "ttlMs": 15000, "holder": "me"},
    )
    site = {
        "cluster": "unit",
        "state_dir": str(tmp_path / "state"),
        "controller": {"ca": str(pki.ca), "addresses": [fake.address], "connect_timeout": 2},
        "providers": {"sim": {"module": "xcesim"}},
        "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
    }
    text = json.dumps(site)
    loaded = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
    with (
        pytest.raises(
            LeaseHeld,
            match=r"provider sim: the controller granted the lease to me, not to this process "
            r"alone .*nothing was changed",
        ) as refused,
        fenced_session(loaded, ["sim"], toolkit_root()),
    ):
        pass
    assert refused.value.exit_code == 9
    assert "leaseAcquire" in fake.seen and "leaseRelease" not in fake.seen
