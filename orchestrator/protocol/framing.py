"""The frame codec: an 8-byte little-endian length, then one unpacked Cap'n Proto message.

Reading is bounded three ways, so a peer cannot make the reader use unbounded memory or time:
the frame length is checked against ``max_bytes`` before the body is read; the body is decoded
with a traversal limit (in 8-byte words) proportional to the frame size, which stops
amplification bombs (many pointers to the same large object); and a nesting limit.

pycapnp decodes lazily: limits are enforced while fields are *read*, so every read of a decoded
message belongs inside :func:`open_envelope`'s ``with`` block, which turns pycapnp's exceptions
into the typed errors below. After any :class:`FrameError` the stream is out of step (or the
peer is hostile): drop the connection.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import capnp

from orchestrator.errors import ControllerError
from orchestrator.protocol.schema import Envelope

HEADER: Final = struct.Struct("<Q")  # the frame length in bytes, little-endian, header excluded
DEFAULT_MAX_FRAME_BYTES: Final = 4 * 1024 * 1024
# The schema nests at most 5 pointers deep (Envelope > status > hosts > HostInfo > Text); a
# reader only follows pointers the schema names, so 16 leaves room for growth and no more.
DEFAULT_NESTING_LIMIT: Final = 16
# Words a legitimate reader traverses per word of message; a reader that converts a message once
# traverses each word about once, so 4x plus a floor leaves room for re-reading small fields.
TRAVERSAL_FACTOR: Final = 4
TRAVERSAL_FLOOR_WORDS: Final = 4096


class FrameError(ControllerError):
    """A frame could not be read or decoded; the connection must be dropped."""


class ConnectionClosed(FrameError):
    """The peer closed the connection cleanly between frames."""


class FrameTooLarge(FrameError):
    """The length prefix announces more than the configured maximum frame size."""

    def __init__(self, length: int, max_bytes: int) -> None:
        super().__init__(f"frame of {length} bytes exceeds the maximum of {max_bytes} bytes")
        self.length = length
        self.max_bytes = max_bytes


class FrameTruncated(FrameError):
    """The connection ended inside a frame (in the header or the body)."""


class FrameGarbage(FrameError):
    """The body is not a well-formed Cap'n Proto message of the protocol."""


class TraversalLimitExceeded(FrameGarbage):
    """Reading the message traversed more words than allowed (an amplification bomb)."""


class WrongMessageType(FrameError):
    """A well-formed message that is not allowed here (wrong union member, push as request, ...)."""

    def __init__(self, got: str, expected: str) -> None:
        super().__init__(f"unexpected message {got!r} (expected {expected})")
        self.got = got


def _recv_exactly(sock: socket.socket | ssl.SSLSocket, length: int, *, in_header: bool) -> bytes:
    """Read exactly ``length`` bytes; EOF before the first byte of a header is a clean close."""
    buf = bytearray(length)
    view = memoryview(buf)
    got = 0
    while got < length:
        try:
            n = sock.recv_into(view[got:], length - got)
        except ssl.SSLZeroReturnError:
            n = 0
        if n == 0:
            if in_header and got == 0:
                raise ConnectionClosed("connection closed by peer")
            where = "header" if in_header else "body"
            raise FrameTruncated(f"connection closed inside a frame {where} ({got} of {length} bytes)")
        got += n
    return bytes(buf)


def send_frame(sock: socket.socket | ssl.SSLSocket, data: bytes, max_bytes: int | None = None) -> None:
    """Write one frame (header and body) with ``sendall``; blocks until written.

    Not thread-safe per socket: callers that send from several threads hold a lock around it.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise FrameTooLarge(len(data), max_bytes)
    sock.sendall(HEADER.pack(len(data)) + data)


def recv_frame(sock: socket.socket | ssl.SSLSocket, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Read one frame body; blocks until a whole frame arrived.

    Raises :class:`ConnectionClosed` on a clean close between frames, :class:`FrameTruncated`
    inside a frame, :class:`FrameTooLarge` (without reading the body) and :class:`FrameGarbage`
    for a length that cannot be a Cap'n Proto message (0 or not a multiple of 8). Socket
    timeouts propagate as ``TimeoutError``; the stream is then out of step.
    """
    (length,) = HEADER.unpack(_recv_exactly(sock, HEADER.size, in_header=True))
    if length > max_bytes:
        raise FrameTooLarge(length, max_bytes)
    if length == 0 or length % 8:
        raise FrameGarbage(f"frame length {length} is not a positive multiple of 8")
    return _recv_exactly(sock, length, in_header=False)


def check_frame_length(length: int, max_bytes: int) -> None:
    """Validate a length prefix already read (for non-blocking readers); raises like :func:`recv_frame`."""
    if length > max_bytes:
        raise FrameTooLarge(length, max_bytes)
    if length == 0 or length % 8:
        raise FrameGarbage(f"frame length {length} is not a positive multiple of 8")


def traversal_limit_for(length: int) -> int:
    """The traversal limit (in words) used for a body of ``length`` bytes."""
    return TRAVERSAL_FLOOR_WORDS + TRAVERSAL_FACTOR * (length // 8)


def _translate(exc: BaseException) -> FrameGarbage:
    text = str(exc)
    if "traversal limit" in text.lower():
        return TraversalLimitExceeded(f"message exceeds the traversal limit: {text.splitlines()[0][:200]}")
    if "nesting" in text.lower():
        return FrameGarbage(f"message exceeds the nesting limit: {text.splitlines()[0][:200]}")
    first = text.splitlines()[0][:200] if text else type(exc).__name__
    return FrameGarbage(f"malformed message: {first}")


@contextmanager
def open_envelope(
    data: bytes,
    *,
    traversal_limit_words: int | None = None,
    nesting_limit: int = DEFAULT_NESTING_LIMIT,
) -> Iterator[Any]:
    """Decode ``data`` as an ``Envelope`` and yield the reader; valid only inside the block.

    pycapnp errors raised while reading fields inside the block (traversal limit, bad pointers,
    an unset or unknown union member) come out as :class:`FrameGarbage` or
    :class:`TraversalLimitExceeded`.
    """
    limit = traversal_limit_words if traversal_limit_words is not None else traversal_limit_for(len(data))
    try:
        ctx = Envelope.from_bytes(data, traversal_limit_in_words=limit, nesting_limit=nesting_limit)
        reader = ctx.__enter__()
    except (capnp.KjException, ValueError, TypeError) as exc:
        raise _translate(exc) from exc
    try:
        try:
            # Reading the discriminant validates the root pointer and the union up front.
            reader.which()
        except (capnp.KjException, ValueError) as exc:
            raise _translate(exc) from exc
        yield reader
    except capnp.KjException as exc:
        # Raised by the caller's reads inside the block (e.g. the traversal limit hit mid-way).
        raise _translate(exc) from exc
    finally:
        ctx.__exit__(None, None, None)


def which(reader: Any) -> str:
    """The Envelope union member name of a decoded message."""
    return str(reader.which())


def expect(reader: Any, allowed: frozenset[str] | set[str], expected: str) -> str:
    """Return the union member name if it is in ``allowed``, else raise :class:`WrongMessageType`."""
    kind = which(reader)
    if kind not in allowed:
        raise WrongMessageType(kind, expected)
    return kind


def encode(builder: Any) -> bytes:
    """Serialize a message builder (unpacked). Build a fresh message per send."""
    data: bytes = builder.to_bytes()
    return data


def new_envelope(request_id: int = 0) -> Any:
    """A fresh ``Envelope`` builder with ``requestId`` set (0 for pushes)."""
    env = Envelope.new_message()
    env.requestId = request_id
    return env
