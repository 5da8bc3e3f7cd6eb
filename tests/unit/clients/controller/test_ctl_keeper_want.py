"""The lease keeper's changeable set of wanted providers, through its child process and a fake controller."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from ctlfake import FakeConn, FakeController, Pki, wait_for

from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.errors import LeaseLost
from orchestrator.model.config import ControllerSettings


def test_want_releases_the_dropped_lease_and_acquires_the_added_one(fake: FakeController, pki: Pki) -> None:
    asked: list[tuple[str, str]] = []
    lock = threading.Lock()

    def recording(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        with lock:
            asked.append((member, str(payload["provider"])))
        return fake.default(member, payload, conn)

    for member in ("leaseAcquire", "leaseRenew", "leaseRelease"):
        fake.handlers[member] = recording
    settings = ControllerSettings(addresses=[fake.address], ca=pki.ca, connect_timeout=2.0, request_timeout=2.0)
    keeper = LeaseKeeper(settings, instance_id="k", providers=["p1", "p2"], margin=0.5, wanted=["p1"])
    keeper.start()
    try:
        assert wait_for(lambda: keeper.valid("p1"), 20)
        # p2 is configured but not dealt here: never asked for, its gate says why.
        with pytest.raises(LeaseLost, match="not asked for: dealt to another instance"):
            keeper.gate("p2")
        assert {p for _, p in asked} == {"p1"}

        keeper.want(["p2"])
        assert wait_for(lambda: keeper.valid("p2") and not keeper.valid("p1"), 20)
        assert wait_for(lambda: ("leaseRelease", "p1") in asked, 20)
        with pytest.raises(LeaseLost, match="not asked for"):
            keeper.gate("p1")
        status = {s.provider: s for s in keeper.status()}
        assert status["p2"].held and not status["p1"].held
        assert status["p1"].holder == "not asked for: dealt to another instance"
        # A provider not configured here is never asked for.
        keeper.want(["p2", "elsewhere"])
        assert keeper.wanted() == {"p2"}
    finally:
        keeper.close(release=True)
    assert ("leaseRelease", "p2") in asked
    assert [p for m, p in asked if m == "leaseRelease"].count("p1") == 1
