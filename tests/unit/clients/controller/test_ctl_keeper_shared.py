"""The lease keeper's shared records: round trip, never torn, one file per keeper."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from orchestrator.clients.controller.keeper import LeaseKeeper, SharedLeases
from orchestrator.clients.controller.lease import LeaseRecord
from orchestrator.clients.controller.types import Epoch
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import ControllerSettings


def test_round_trip(tmp_path: Path) -> None:
    w = SharedLeases(tmp_path / "l", ["a", "b"], create=True)
    r = SharedLeases(tmp_path / "l", ["a", "b"])
    assert r.read("a") == LeaseRecord(None, -math.inf, 0.0, "")
    renewed = LeaseRecord(Epoch(3, 4), 123.5, 15.0, "", 100.0, 100.25, 100.5)
    w.write("b", renewed)
    assert r.read("b") == renewed
    w.write("a", LeaseRecord(None, -math.inf, 0.0, "held by orch-b"))
    assert r.read("a").note == "held by orch-b"
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
            w.write("a", LeaseRecord(Epoch(n, n), float(n), float(n), str(n), float(n), float(n), float(n)))

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(20_000):
            rec = r.read("a")
            if rec.epoch is not None and not (
                rec.epoch.term
                == rec.epoch.seq
                == rec.valid_until
                == rec.ttl
                == float(rec.note)
                == rec.renewal_due
                == rec.renewal_sent
                == rec.renewal_confirmed
            ):
                bad.append(rec)
    finally:
        stop.set()
        t.join()
    assert bad == []


def test_gate_before_start_refuses() -> None:
    keeper = LeaseKeeper(ControllerSettings(), instance_id="x", providers=["p1"])
    with pytest.raises(LeaseLost, match="not running"):
        keeper.gate("p1")
    keeper.close()
