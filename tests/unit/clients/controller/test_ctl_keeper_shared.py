"""The lease keeper's shared records: round trip, never torn, one file per keeper."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from orchestrator.clients.controller.keeper import LeaseKeeper, SharedLeases
from orchestrator.clients.controller.types import Epoch
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import ControllerSettings


def test_round_trip(tmp_path: Path) -> None:
    w = SharedLeases(tmp_path / "l", ["a", "b"], create=True)
    r = SharedLeases(tmp_path / "l", ["a", "b"])
    assert r.read("a") == (None, -math.inf, 0.0, "")
    w.write("b", Epoch(3, 4), 123.5, 15.0, "")
    assert r.read("b") == (Epoch(3, 4), 123.5, 15.0, "")
    w.write("a", None, -math.inf, 0.0, "held by orch-b")
    assert r.read("a")[3] == "held by orch-b"
    with pytest.raises(ControllerError, match="does not match"):
        SharedLeases(tmp_path / "l", ["a"])
    w.close()
    r.close()


def test_readers_never_see_a_torn_record(tmp_path: Path) -> None:
    w = SharedLeases(tmp_path / "l", ["a"], create=True)
    r = SharedLeases(tmp_path / "l", ["a"])
    stop = threading.Event()
    bad: list[object] = []

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            w.write("a", Epoch(n, n), float(n), float(n), str(n))

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(20_000):
            epoch, until, ttl, note = r.read("a")
            if epoch is not None and not (epoch.term == epoch.seq == until == ttl == float(note)):
                bad.append((epoch, until, ttl, note))
    finally:
        stop.set()
        t.join()
    assert bad == []


def test_gate_before_start_refuses() -> None:
    keeper = LeaseKeeper(ControllerSettings(), instance_id="x", providers=["p1"])
    with pytest.raises(LeaseLost, match="not running"):
        keeper.gate("p1")
    keeper.close()
