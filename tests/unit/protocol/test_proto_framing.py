"""Frame codec: round trip, every malformed case, limits, schema loaded once."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from sim_controller_helpers import traversal_bomb

from orchestrator.protocol import framing, schema
from orchestrator.protocol.framing import (
    ConnectionClosed,
    FrameGarbage,
    FrameTooLarge,
    FrameTruncated,
    TraversalLimitExceeded,
    WrongMessageType,
    encode,
    expect,
    new_envelope,
    open_envelope,
    recv_frame,
    send_frame,
)
from orchestrator.protocol.schema import REPLIES, REQUESTS


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _join(rid: int = 7, providers: list[str] | None = None) -> bytes:
    env = new_envelope(rid)
    j = env.init("joinProvisioner")
    j.instanceId = "orch-a"
    j.version = "1"
    j.providers = providers if providers is not None else ["sim", "aws"]
    return encode(env)


def test_round_trip(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    send_frame(a, _join())
    data = recv_frame(b, 1 << 20)
    with open_envelope(data) as env:
        assert expect(env, REQUESTS, "a request") == "joinProvisioner"
        assert env.requestId == 7
        assert list(env.joinProvisioner.providers) == ["sim", "aws"]


def test_header_is_little_endian_length(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    body = _join()
    send_frame(a, body)
    raw = b.recv(8)
    assert raw == struct.pack("<Q", len(body))
    assert len(body) % 8 == 0


def test_oversize_is_refused_before_reading_body(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(struct.pack("<Q", 10 * 1024 * 1024))
    with pytest.raises(FrameTooLarge) as info:
        recv_frame(b, 1024 * 1024)
    assert info.value.length == 10 * 1024 * 1024


def test_send_refuses_oversize(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    with pytest.raises(FrameTooLarge):
        send_frame(a, b"\0" * 4096, max_bytes=1024)


def test_truncated_header(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(b"\x10\x00\x00")
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(FrameTruncated, match="header"):
        recv_frame(b)


def test_truncated_body(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    body = _join()
    a.sendall(struct.pack("<Q", len(body)) + body[:-8])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(FrameTruncated, match="body"):
        recv_frame(b)


def test_clean_close_between_frames(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(ConnectionClosed):
        recv_frame(b)


@pytest.mark.parametrize("length", [0, 13])
def test_length_not_a_message(pair: tuple[socket.socket, socket.socket], length: int) -> None:
    a, b = pair
    a.sendall(struct.pack("<Q", length) + b"\0" * length)
    with pytest.raises(FrameGarbage):
        recv_frame(b)


@pytest.mark.parametrize(
    "data",
    [
        b"\xff" * 64,  # segment count 2^32: nonsense segment table
        struct.pack("<II", 0, 100) + b"\0" * 16,  # one segment of 100 words, 16 bytes present
        struct.pack("<II", 0, 1) + struct.pack("<Q", (0x7FFFFF << 2) | (1 << 32)),  # root struct far outside
        bytes(range(256)) * 2,
    ],
)
def test_garbage_is_frame_garbage(data: bytes) -> None:
    with pytest.raises(FrameGarbage), open_envelope(data) as env:
        # Reading must go through the with block: pycapnp decodes lazily.
        env.joinProvisioner.instanceId  # noqa: B018


def test_wrong_type() -> None:
    env = new_envelope(3)
    env.init("joined").term = 1
    with open_envelope(encode(env)) as r, pytest.raises(WrongMessageType, match="joined"):
        expect(r, REQUESTS, "a request")
    env = new_envelope(3)
    env.init("leaseAcquire").provider = "sim"
    with open_envelope(encode(env)) as r, pytest.raises(WrongMessageType):
        expect(r, REPLIES, "a reply")


def test_traversal_bomb_is_stopped() -> None:
    data = traversal_bomb()
    assert len(data) < 64 * 1024
    with pytest.raises(TraversalLimitExceeded), open_envelope(data) as env:
        for p in env.joinProvisioner.providers:
            len(p)


def test_legit_large_message_is_within_the_limit() -> None:
    data = _join(providers=[f"provider-{i}" for i in range(5000)])
    with open_envelope(data) as env:
        assert len(list(env.joinProvisioner.providers)) == 5000


def test_nesting_limit_is_enforced_and_the_default_covers_the_schema() -> None:
    env = new_envelope(1)
    env.init("status").init("hosts", 1)[0].hostName = "h"
    data = encode(env)
    with pytest.raises(FrameGarbage, match="nesting"), open_envelope(data, nesting_limit=2) as r:
        r.status.hosts[0].hostName  # noqa: B018
    with open_envelope(data) as r:  # the deepest path of the schema, under the default limit
        assert r.status.hosts[0].hostName == "h"


def test_schema_is_loaded_once() -> None:
    import importlib

    again = importlib.import_module("orchestrator.protocol.schema")
    assert again.schema is schema.schema
    assert vars(framing)["Envelope"] is schema.Envelope


def test_no_other_module_loads_a_schema() -> None:
    """pycapnp aborts the interpreter when a schema id is loaded from two paths: one loader only."""
    from pathlib import Path

    package = Path(schema.__file__).resolve().parents[1]
    # The node manager artifact runs in its own interpreter on a host, with its bundled copy of
    # the schema and without this package; in the source tree it shares this module too.
    artifact = package / "sim" / "nodemanager"
    loaders = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if artifact not in p.parents and "capnp.load(" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert loaders == ["protocol/schema.py"]
    # Every union member is classified as request, reply or push.
    members: set[str] = set(schema.Envelope.schema.union_fields)
    assert members == set(REQUESTS) | set(REPLIES) | set(schema.PUSHES)
