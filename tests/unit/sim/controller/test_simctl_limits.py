"""Bounded cost of hostile clients: whole-frame deadlines, memory as bytes arrive, caps on
connections per peer and on unjoined connections."""

from __future__ import annotations

import select
import socket
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from sim_controller_helpers import ProtoClient, join_provisioner, running_controller, wait_for

from orchestrator.protocol.framing import FrameTooLarge, encode, new_envelope
from orchestrator.sim.controller.reader import FrameReader
from orchestrator.sim.controller.server import ConnectionLimits


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server has closed the connection (EOF or reset is readable now)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def _request_frame() -> bytes:
    env = new_envelope(1)
    env.requestDemand = None
    body = encode(env)
    return struct.pack("<Q", len(body)) + body


def test_byte_at_a_time_client_is_cut_off_and_others_are_served(tmp_path: Path, clients: list[ProtoClient]) -> None:
    limits = ConnectionLimits(frame_timeout=1.0, join_timeout=60.0)
    with running_controller(tmp_path / "ctl", limits=limits) as rc:
        good = rc.provisioner("orch-a")
        clients.append(good)
        assert join_provisioner(good, "orch-a", ["sim"]).kind == "joined"
        slow = rc.anonymous()
        clients.append(slow)
        frame = _request_frame()
        # One byte every 0.1 s: every recv is quick, the frame as a whole is late (>= 1 s).
        sent, dropped = 0, False
        for byte in frame:
            try:
                slow.sock.sendall(bytes([byte]))
            except OSError:
                dropped = True
                break
            sent += 1
            time.sleep(0.1)
            if _closed_by_peer(slow.sock):
                dropped = True
                break
        assert dropped, f"the whole {len(frame)}-byte frame was accepted one byte at a time"
        assert sent < len(frame)
        r = good.request(lambda env: setattr(env, "requestDemand", None))
        assert r.kind == "demand"


def test_a_frame_header_alone_allocates_nothing_like_the_claimed_size() -> None:
    claimed = 4 * 1024 * 1024
    reader = FrameReader(claimed)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert reader.feed(struct.pack("<Q", claimed), 0.0) == []
        assert reader.feed(b"\0" * 8, 0.0) == []
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert reader.in_frame and reader.buffered == 8
    assert peak < 64 * 1024, f"{peak} bytes allocated for a header claiming {claimed}"
    with pytest.raises(FrameTooLarge):
        FrameReader(1024).feed(struct.pack("<Q", 2048), 0.0)


def test_frames_split_and_joined_arbitrarily_come_out_whole() -> None:
    frames = [b"a" * 8, b"b" * 16, b"c" * 24]
    stream = b"".join(struct.pack("<Q", len(f)) + f for f in frames)
    reader = FrameReader(1024)
    out: list[bytes] = []
    for i in range(0, len(stream), 5):
        out += reader.feed(stream[i : i + 5], float(i))
    assert out == frames and not reader.in_frame


def test_header_only_frame_on_the_wire_is_dropped_at_its_deadline(tmp_path: Path, clients: list[ProtoClient]) -> None:
    limits = ConnectionLimits(frame_timeout=0.5, join_timeout=60.0)
    with running_controller(tmp_path / "ctl", limits=limits, max_frame_bytes=4 * 1024 * 1024) as rc:
        c = rc.anonymous()
        clients.append(c)
        c.send_raw(struct.pack("<Q", 4 * 1024 * 1024))
        c.sock.settimeout(10)
        assert c.sock.recv(1) == b""  # closed by the server


def test_connections_per_peer_are_capped(tmp_path: Path, clients: list[ProtoClient]) -> None:
    with running_controller(tmp_path / "ctl", limits=ConnectionLimits(max_per_peer=2)) as rc:
        for name in ("a", "b"):
            c = rc.provisioner(name)
            clients.append(c)
            assert join_provisioner(c, name, ["sim"]).kind == "joined"
        with pytest.raises(OSError):
            extra = rc.provisioner("c")
            clients.append(extra)
            join_provisioner(extra, "c", ["sim"])
        clients[0].close()
        wait_for("the closed connection to be forgotten", lambda: rc.server.connection_count() == 1)
        again = rc.provisioner("c")
        clients.append(again)
        assert join_provisioner(again, "c", ["sim"]).kind == "joined"


def test_unjoined_connections_are_capped_joined_ones_are_not(tmp_path: Path, clients: list[ProtoClient]) -> None:
    with running_controller(tmp_path / "ctl", limits=ConnectionLimits(max_unjoined=2)) as rc:
        joined = rc.provisioner("a")
        clients.append(joined)
        assert join_provisioner(joined, "a", ["sim"]).kind == "joined"
        for _ in range(2):
            clients.append(rc.anonymous())  # connected, never joined
        wait_for("both idle connections to be registered", lambda: rc.server.connection_count() == 3)
        with pytest.raises(OSError):
            extra = rc.anonymous()
            clients.append(extra)
            extra.request(lambda env: setattr(env, "requestDemand", None))
        assert joined.request(lambda env: setattr(env, "requestDemand", None)).kind == "demand"


def test_a_handshake_that_never_finishes_is_dropped_and_others_are_served(
    tmp_path: Path, clients: list[ProtoClient]
) -> None:
    with running_controller(tmp_path / "ctl", limits=ConnectionLimits(handshake_timeout=0.5)) as rc:
        with socket.create_connection(rc.addr, timeout=10) as raw:
            raw.sendall(b"\x16\x03\x01")  # the start of a TLS record, then nothing
            assert raw.recv(1) == b""  # closed by the server
        good = rc.provisioner("orch-a")
        clients.append(good)
        assert join_provisioner(good, "orch-a", ["sim"]).kind == "joined"
