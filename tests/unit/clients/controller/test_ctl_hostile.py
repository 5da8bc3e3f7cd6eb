"""A hostile controller: every frame costs the link bounded memory, and the lease survives it."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hostile
import pytest
from ctlfake import FakeConn, FakeController, Pki, record_joins, wait_for

from orchestrator.clients.controller import messages as m
from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.lease import LeaseManager, LeaseRecord
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.errors import LeaseLost
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol import framing
from orchestrator.protocol.decode import MEMORY_BOUND_BYTES, DecodeLimits, FrameLimitExceeded, to_plain
from orchestrator.protocol.schema import Envelope

HERE = Path(__file__).resolve().parent


def test_zero_sized_struct_list_is_refused_before_any_element_is_made() -> None:
    data = hostile.zero_sized_struct_list()
    assert len(data) <= framing.DEFAULT_MAX_FRAME_BYTES
    with pytest.raises(FrameLimitExceeded, match=r"demand\.templates has 2100000 elements \(limit 25000\)"):
        m.read_frame(data)


def test_huge_text_is_refused() -> None:
    with pytest.raises(FrameLimitExceeded, match=r"leaseRevoked\.provider has \d+ bytes \(limit 65536\)"):
        m.read_frame(hostile.huge_text())


def test_lists_sharing_words_count_against_the_total() -> None:
    # 2 lists of 20,000 fit the default total of 50,000; with a total of 30,000 the second is refused.
    data = hostile.shared_list_status()
    frame = m.read_frame(data)
    assert frame is not None and len(frame[2]["hosts"]) == len(frame[2]["leases"]) == 20_000
    with pytest.raises(FrameLimitExceeded, match="more than 30000 list elements"), framing.open_envelope(data) as env:
        to_plain(env, DecodeLimits(max_elements=30_000), frame_bytes=len(data))


def test_total_text_is_bounded_by_the_frame() -> None:
    env = Envelope.new_message(requestId=1, hostList={"hosts": [{"hostName": "h" * 1000}] * 20})
    data = framing.encode(env)
    with (
        pytest.raises(FrameLimitExceeded, match="text exceeds its limit in total"),
        framing.open_envelope(data) as reader,
    ):
        to_plain(reader, DecodeLimits(max_total_text_bytes=10_000), frame_bytes=len(data))


def test_bounded_conversion_reads_what_to_dict_reads() -> None:
    env = Envelope.new_message(
        requestId=7,
        factList={
            "provider": "p1",
            "more": True,
            "facts": [
                {
                    "kind": "expectedHost",
                    "provider": "p1",
                    "opId": "op",
                    "epoch": {"term": 2, "seq": 3},
                    "hostName": "cpu-1",
                    "detail": "é" * 10,
                    "joinDeadlineUnixMs": 5,
                }
            ],
        },
    )
    with framing.open_envelope(framing.encode(env)) as reader:
        assert to_plain(reader) == reader.to_dict()


CHILD = r"""
import json, sys, tracemalloc
sys.path.insert(0, sys.argv[1])
import hostile
from orchestrator.clients.controller import messages as m
from orchestrator.protocol import framing

FRAMES = {
    "zero-sized structs": lambda: hostile.zero_sized_struct_list(),
    "huge text": lambda: hostile.huge_text(),
    "pointer cycle and shared lists": lambda: hostile.shared_list_status(),
    "largest accepted fact list": lambda: hostile.zero_sized_struct_list(25_000, "factList", "facts", 1),
}
CONVERT = {"status": m.controller_status, "factList": lambda p: [m.fact(f) for f in p["facts"]]}

def run(data):
    try:
        frame = m.read_frame(data)
    except framing.FrameError as exc:
        return f"refused: {exc}"
    _, kind, payload = frame
    return f"accepted: {kind} -> {type(CONVERT.get(kind, lambda p: p)(payload)).__name__}"

def peak_rss():
    # VmHWM: this address space's peak RSS (ru_maxrss would carry the parent's over exec).
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

data = FRAMES[sys.argv[2]]()
run(framing.encode(framing.new_envelope(1)))  # warm up: pycapnp's lazy parts
before = peak_rss()
outcome = run(data)
rss = peak_rss() - before
tracemalloc.start()
run(data)
traced = tracemalloc.get_traced_memory()[1]
print(json.dumps({"outcome": outcome, "rss_delta": rss, "traced_peak": traced, "frame": len(data)}))
"""

EXPECTED = {
    "zero-sized structs": "refused: list Envelope.demand.templates has 2100000 elements",
    "huge text": "refused: text Envelope.leaseRevoked.provider has",
    "pointer cycle and shared lists": "accepted: status -> ControllerStatus",
    "largest accepted fact list": "accepted: factList -> list",
}


@pytest.mark.parametrize("shape", list(EXPECTED))
def test_hostile_frames_cost_less_than_the_documented_memory_bound(shape: str) -> None:
    # One child process per frame, so that its peak RSS belongs to this conversion alone; the
    # traced peak counts every Python allocation of the conversion exactly.
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), shape],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["frame"] > 4_000_000 or shape == "largest accepted fact list"
    assert result["outcome"].startswith(EXPECTED[shape]), result
    assert result["rss_delta"] < MEMORY_BOUND_BYTES, result
    assert result["traced_peak"] < MEMORY_BOUND_BYTES, result


# -- over TLS, with a lease held --------------------------------------------------------------


def _settings(fake: FakeController, pki: Pki, **kw: Any) -> ControllerSettings:
    base: dict[str, Any] = {"connect_timeout": 2.0, "request_timeout": 2.0}
    base.update(kw)
    return ControllerSettings(addresses=[fake.address], ca=pki.ca, **base)


def _short_leases(fake: FakeController, ttl_ms: int) -> list[FakeConn]:
    """Grant leases with ``ttl_ms``; returns the list the joined connections are appended to."""

    def grant(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        kind, body = fake.default(member, payload, conn)
        body["ttlMs"] = ttl_ms
        body["epoch"] = {"term": 1, "seq": 1}
        return kind, body

    fake.handlers["leaseAcquire"] = grant
    fake.handlers["leaseRenew"] = grant
    return record_joins(fake)


def _send_raw(conn: FakeConn, body: bytes) -> None:
    with conn.lock:
        conn.sock.sendall(framing.HEADER.pack(len(body)) + body)


def test_hostile_frames_drop_the_connection_and_the_lease_stays_valid(
    fake: FakeController, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    conns = _short_leases(fake, ttl_ms=4500)
    link = ControllerLink(_settings(fake, pki), instance_id="a", providers=["p1"])
    records: list[LeaseRecord] = []

    def changed(provider: str) -> None:  # every lease change, renewals included
        records.append(manager.record(provider))

    manager = LeaseManager(link, ["p1"], margin=0.5, on_change=changed)
    join_lease_manager(link, manager)
    link.start()
    manager.start()
    try:
        assert wait_for(lambda: manager.valid("p1"), 10)
        for n, frame in enumerate((hostile.zero_sized_struct_list(), hostile.huge_text()), start=1):
            _send_raw(conns[-1], frame)
            # Dropped as a protocol error, then rejoined (the reconnect path).
            assert wait_for(lambda n=n: len(conns) > n and link.state().connected, 15), link.state()
        # Accepted hostile shapes (within the limits) leave the connection up.
        _send_raw(conns[-1], hostile.shared_list_status())
        renewed = [r.renewal_sent for r in records if r.epoch is not None]
        assert wait_for(lambda: sum(1 for r in records if r.renewal_sent > renewed[-1]) >= 2, 10)
        assert manager.valid("p1")
    finally:
        manager.close()
        link.close()
    # The lease never lapsed: every confirmed renewal was sent before the previous deadline.
    held = [r for r in records if r.epoch is not None]
    assert len(held) >= 3
    assert all(b.renewal_sent < a.valid_until for a, b in itertools.pairwise(held))
    assert fake.seen.count("joinProvisioner") >= 3
    dropped = [r.getMessage() for r in caplog.records if "dropping the connection" in r.getMessage()]
    assert any("demand.templates has 2100000 elements" in d for d in dropped), dropped
    assert any("leaseRevoked.provider has" in d for d in dropped), dropped


def test_flooded_reader_cannot_keep_the_gate_open(fake: FakeController, pki: Pki) -> None:
    """The keeper's link gets one grant, then only a flood of frames that are costly to decode
    and no answer to any lease request: the gate closes at renew_sent + TTL - margin."""
    granted_at: list[float] = []
    stop = threading.Event()
    flood = hostile.shared_list_status()

    def flood_forever(conn: FakeConn) -> None:
        # Only once the grant is through (the flood must not starve the grant itself).
        wait_for(lambda: keeper.record("p1").epoch is not None, 20)
        while not stop.is_set():
            try:
                _send_raw(conn, flood)
            except OSError:
                return

    def lease(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any] | None:
        if not granted_at:
            granted_at.append(time.monotonic())
            threading.Thread(target=flood_forever, args=(conn,), daemon=True).start()
            return "leaseGrant", {"provider": "p1", "epoch": {"term": 1, "seq": 1}, "ttlMs": 2000}
        return None  # stuck: no reply ever comes

    fake.handlers["leaseAcquire"] = lease
    fake.handlers["leaseRenew"] = lease
    keeper = LeaseKeeper(_settings(fake, pki, request_timeout=1.0), instance_id="k", providers=["p1"], margin=0.5)
    keeper.start()
    try:
        assert wait_for(lambda: keeper.record("p1").epoch is not None, 20)
        first = keeper.record("p1")
        # Validity derives from the one confirmed grant: sent before the controller saw it.
        assert first.valid_until == first.renewal_sent + 2.0 - 0.5
        assert first.renewal_sent <= granted_at[0]
        assert wait_for(lambda: not keeper.valid("p1"), 10)
        assert time.monotonic() >= first.valid_until
        with pytest.raises(LeaseLost, match="lapsed"):
            keeper.gate("p1")
        assert keeper.record("p1").valid_until == first.valid_until  # never extended
    finally:
        stop.set()
        keeper.close(release=False)


def test_a_push_flood_does_not_stop_the_keepers_renewals(fake: FakeController, pki: Pki) -> None:
    """The keeper's link is lease-only: pushes cost it a type check, so renewals keep up while
    the controller pushes demand snapshots as fast as it can on the keeper's connection."""
    conns = _short_leases(fake, ttl_ms=3000)
    stop = threading.Event()
    pushed: list[int] = []

    def flood(conn: FakeConn) -> None:
        while not stop.is_set():
            try:
                conn.push(
                    "demand", {"seq": len(pushed) + 1, "term": 1, "templates": [{"template": "cpu", "wanted": 1}]}
                )
            except OSError:
                return
            pushed.append(1)
            time.sleep(0)  # let the fake's reply thread take the connection's lock too

    keeper = LeaseKeeper(_settings(fake, pki), instance_id="k", providers=["p1"], margin=0.5)
    keeper.start()
    try:
        assert wait_for(lambda: keeper.valid("p1") and bool(conns), 20)
        threading.Thread(target=flood, args=(conns[0],), daemon=True).start()
        assert wait_for(lambda: len(pushed) > 1000, 20)
        before = keeper.record("p1").renewal_sent
        sent: set[float] = set()

        def renewed_thrice() -> bool:
            r = keeper.record("p1")
            assert r.epoch is not None and time.monotonic() < r.valid_until  # never lapses
            if r.renewal_sent > before:
                sent.add(r.renewal_sent)
            return len(sent) >= 3

        assert wait_for(renewed_thrice, 20)
        assert len(conns) == 1  # the same connection throughout
    finally:
        stop.set()
        keeper.close(release=False)
