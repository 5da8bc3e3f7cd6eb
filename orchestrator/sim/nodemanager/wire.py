"""Frames over TLS for the worker role: stdlib only (shipped in the artifact).

A frame is an 8-byte little-endian unsigned length followed by that many bytes of one unpacked
Cap'n Proto message (docs/protocol.md). The same rules as ``orchestrator.protocol.framing``,
repeated here because the artifact cannot import the orchestrator package.
"""

from __future__ import annotations

import socket
import ssl
import struct

HEADER = struct.Struct("<Q")


class WireError(Exception):
    """The connection failed or the peer sent something we will not read (one line)."""


def tls_context(ca_file: str, client_cert: str = "", client_key: str = "") -> ssl.SSLContext:
    """A client context that verifies the controller against ``ca_file`` (and its host name)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_cert:
        ctx.load_cert_chain(client_cert, client_key or None)
    return ctx


def connect(host: str, port: int, ctx: ssl.SSLContext, server_name: str, timeout: float) -> ssl.SSLSocket:
    """Open a verified TLS connection (TCP_NODELAY: small request/reply frames)."""
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return ctx.wrap_socket(raw, server_hostname=server_name or host)
    except BaseException:
        raw.close()
        raise


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Write one frame."""
    sock.sendall(HEADER.pack(len(body)) + body)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise WireError("connection closed by the controller")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, max_bytes: int) -> bytes:
    """Read one frame; refuses lengths over ``max_bytes`` or not a multiple of 8 words."""
    (length,) = HEADER.unpack(_read_exact(sock, HEADER.size))
    if length > max_bytes:
        raise WireError(f"frame of {length} bytes exceeds the limit of {max_bytes}")
    if length == 0 or length % 8:
        raise WireError(f"frame length {length} is not a whole number of Cap'n Proto words")
    return _read_exact(sock, length)
