"""A minimal test client of the provisioner protocol and a fixture-friendly controller starter.

Not the real client (that is ``orchestrator.clients.controller``): just enough to drive the
simulated controller over TLS from tests, one request at a time, collecting pushes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.protocol import schema
from orchestrator.protocol.framing import encode, new_envelope, open_envelope, recv_frame, send_frame
from orchestrator.protocol.jointoken import join_token, read_join_key
from orchestrator.protocol.tls import client_context, server_context
from orchestrator.sim.controller import admin
from orchestrator.sim.controller.clock import Clock, SystemClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.server import ConnectionLimits, ControllerServer
from orchestrator.sim.controller.store import ControllerStore
from orchestrator.sim.pki import ensure_server_tls, issue_client, load_ca

ClientCert = tuple[Path, Path]  # (certificate, key)


def to_py(reader: Any) -> Any:
    """A decoded struct as plain dicts (so it outlives the message)."""
    return reader.to_dict()


@dataclass
class Reply:
    """One reply: its union member name and its body as plain data."""

    kind: str
    body: Any


@dataclass
class ProtoClient:
    """One TLS connection to the controller."""

    sock: ssl.SSLSocket
    pushes: list[Reply] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def send_raw(self, data: bytes) -> None:
        """Write raw bytes (malformed-frame tests)."""
        self.sock.sendall(data)

    def request(self, fill: Callable[[Any], None]) -> Reply:
        """Send one request built by ``fill(envelope)``; return its reply, keeping pushes aside."""
        rid = next(self._ids)
        env = new_envelope(rid)
        fill(env)
        send_frame(self.sock, encode(env))
        while True:
            r = self.read()
            if r[0] == rid:
                return r[1]
            self.pushes.append(r[1])

    def read(self) -> tuple[int, Reply]:
        """Read one frame: (requestId, reply)."""
        frame = recv_frame(self.sock)
        with open_envelope(frame) as env:
            kind = str(env.which())
            body = getattr(env, kind)
            data = None if body is None else (to_py(body) if hasattr(body, "to_dict") else body)
            return int(env.requestId), Reply(kind, data)

    def wait_push(self, kind: str) -> Reply:
        """The next push of ``kind`` (earlier ones collected first)."""
        for i, p in enumerate(self.pushes):
            if p.kind == kind:
                return self.pushes.pop(i)
        while True:
            rid, r = self.read()
            if rid == 0 and r.kind == kind:
                return r
            self.pushes.append(r)

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self.sock.close()


def client_cert(state_dir: Path, role: str, identity: str) -> ClientCert:
    """A client certificate of the controller's CA naming ``role``/``identity`` (made once)."""
    cert, key = state_dir / "clients" / f"{role}-{identity}.pem", state_dir / "clients" / f"{role}-{identity}.key"
    if not cert.exists():
        issue_client(load_ca(state_dir / "tls"), role, identity).write(cert, key)
    return cert, key


def controller_block(state_dir: Path, address: str, identity: str) -> dict[str, Any]:
    """The ``controller:`` section of a test site using the controller at ``address`` as ``identity``."""
    cert, key = client_cert(state_dir, "provisioner", identity)
    return {
        "addresses": [address],
        "ca": str(state_dir / "tls" / "ca.pem"),
        "client_cert": str(cert),
        "client_key": str(key),
        "connect_timeout": 2,
        "request_timeout": 5,
        "lease_margin": 0.5,
    }


def worker_token(state_dir: Path, instance_key: str, host_name: str, expires: int | None = None) -> str:
    """The join token of a host, minted with the controller's join key (by default valid for a
    first join during the next hour)."""
    key = read_join_key(state_dir / "tls" / "join.key")
    return join_token(key, instance_key, host_name, int(time.time()) + 3600 if expires is None else expires)


def connect(
    addr: tuple[str, int],
    ca: Path,
    *,
    cert: ClientCert | None = None,
    server_hostname: str = "localhost",
    timeout: float = 10.0,
) -> ProtoClient:
    """A TLS connection verified against ``ca``, presenting ``cert`` when given."""
    ctx = client_context(ca, cert_file=cert[0] if cert else None, key_file=cert[1] if cert else None)
    raw = socket.create_connection(addr, timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock = ctx.wrap_socket(raw, server_hostname=server_hostname)
    except BaseException:
        raw.close()
        raise
    return ProtoClient(sock)


def join_provisioner(c: ProtoClient, instance_id: str, providers: list[str], lease_instance: str = "") -> Reply:
    """Join as a provisioner (``lease_instance``: the process instance; "" is a legacy join)."""

    def fill(env: Any) -> None:
        j = env.init("joinProvisioner")
        j.instanceId = instance_id
        j.version = "test"
        j.providers = providers
        j.leaseInstance = lease_instance

    return c.request(fill)


def join_worker(
    c: ProtoClient,
    host_name: str,
    instance_id: str = "",
    template: str = "cpu",
    *,
    token: str = "",
    instance_key: str = "",
) -> Reply:
    """Join as a worker, presenting ``token`` (see :func:`worker_token`)."""

    def fill(env: Any) -> None:
        j = env.init("joinWorker")
        j.hostName = host_name
        j.instanceId = instance_id
        j.instanceKey = instance_key
        j.template = template
        j.joinToken = token

    return c.request(fill)


def lease(c: ProtoClient, op: str, provider: str, epoch: tuple[int, int] = (0, 0)) -> Reply:
    """leaseAcquire / leaseRenew / leaseRelease."""

    def fill(env: Any) -> None:
        r = env.init(op)
        r.provider = provider
        r.epoch.term, r.epoch.seq = epoch

    return c.request(fill)


def commit(c: ProtoClient, provider: str, epoch: tuple[int, int], kind: str = "requestIntent", **fields: Any) -> Reply:
    """commitFact."""

    def fill(env: Any) -> None:
        f = env.init("commitFact")
        f.kind = kind
        f.provider = provider
        f.opId = fields.pop("opId", "op-1")
        f.epoch.term, f.epoch.seq = epoch
        for k, v in fields.items():
            setattr(f, k, v)

    return c.request(fill)


@dataclass
class Running:
    """A controller started in-process."""

    core: ControllerCore
    server: ControllerServer
    store: ControllerStore
    ca: Path
    state_dir: Path

    @property
    def addr(self) -> tuple[str, int]:
        """The first listen address."""
        return self.server.addresses[0]

    def provisioner(self, identity: str) -> ProtoClient:
        """A connection presenting a provisioner certificate for ``identity`` (not joined yet)."""
        return connect(self.addr, self.ca, cert=client_cert(self.state_dir, "provisioner", identity))

    def admin(self, identity: str = "ops") -> ProtoClient:
        """A connection presenting an admin certificate (in the admin role from the handshake)."""
        return connect(self.addr, self.ca, cert=client_cert(self.state_dir, "admin", identity))

    def anonymous(self) -> ProtoClient:
        """A connection without a client certificate (a worker, or an unauthenticated peer)."""
        return connect(self.addr, self.ca)

    def token(self, instance_key: str, host_name: str) -> str:
        """A host's join token."""
        return worker_token(self.state_dir, instance_key, host_name)


@contextlib.contextmanager
def running_controller(
    state_dir: Path,
    *,
    clock: Clock | None = None,
    ttl: float = 15.0,
    max_frame_bytes: int = 1024 * 1024,
    tick_interval: float = 0.05,
    redirect: str = "",
    max_connections: int = 512,
    limits: ConnectionLimits | None = None,
    listen: str = "127.0.0.1",
) -> Iterator[Running]:
    """Start a controller on ``listen``:<free port> (a lab's gateway address for simulated hosts)
    with a fresh CA; stop it on exit."""
    files = ensure_server_tls(state_dir / "tls", [listen])
    store = ControllerStore(state_dir)
    core = ControllerCore(
        store, clock or SystemClock(), ttl=ttl, redirect=redirect, join_key=read_join_key(files.join_key)
    )
    server = ControllerServer(
        core,
        server_context(files.server_cert, files.server_key, client_ca_file=files.ca_cert),
        [(listen, 0)],
        admin_path=state_dir / "controller.sock",
        max_frame_bytes=max_frame_bytes,
        max_connections=max_connections,
        tick_interval=tick_interval,
        limits=limits,
    )
    server.start()
    try:
        yield Running(core, server, store, files.ca_cert, state_dir)
    finally:
        server.stop()
        store.close()


def traversal_bomb(copies: int = 2000, text_bytes: int = 8192) -> bytes:
    """A joinProvisioner whose ``providers`` list points ``copies`` times at one large text.

    Small on the wire (one text, ``copies`` pointers) but reading every element traverses the
    text each time: about ``copies * text_bytes / 8`` words.
    """
    env = schema.Envelope.new_message(num_first_segment_words=1 << 16)  # one segment
    env.requestId = 9
    j = env.init("joinProvisioner")
    j.instanceId = "bomb"
    big = "x" * text_bytes
    j.providers = [big] + ["y"] * (copies - 1)
    data = bytearray(encode(env))
    (nseg,) = struct.unpack_from("<I", data, 0)
    assert nseg == 0, "expected one segment"
    seg_start = 8
    words = (len(data) - seg_start) // 8
    want_count = text_bytes + 1  # text lists count the NUL
    first = None
    for w in range(words):
        (ptr,) = struct.unpack_from("<Q", data, seg_start + 8 * w)
        if ptr & 3 == 1 and (ptr >> 32) & 7 == 2 and (ptr >> 35) == want_count:
            first = w
            break
    assert first is not None
    (ptr0,) = struct.unpack_from("<Q", data, seg_start + 8 * first)
    off0 = (ptr0 >> 2) & 0x3FFFFFFF
    if off0 & 0x20000000:
        off0 -= 0x40000000
    for i in range(1, copies):
        off = off0 - i
        ptr = (ptr0 & ~(0x3FFFFFFF << 2)) | ((off & 0x3FFFFFFF) << 2)
        struct.pack_into("<Q", data, seg_start + 8 * (first + i), ptr)
    return bytes(data)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def controller_process(
    tmp_path: Path, *, ttl: float, heartbeat: float, check_interval: float = 0.5
) -> Iterator[tuple[Path, str, subprocess.Popen[bytes]]]:
    """A simulated controller in its own process on a free loopback port: (state dir, address, process).

    Ready when its port accepts connections, its CA is written and its admin socket exists; its
    log is ``tmp_path/controller.log``. Stopped (continued first if a test stopped it) on exit.
    """
    state = tmp_path / "ctl"
    address = f"127.0.0.1:{free_port()}"
    log = open(tmp_path / "controller.log", "wb")  # noqa: SIM115 - closed below
    command = [sys.executable, "-m", "orchestrator.sim.controller", "serve", "--state-dir", str(state)]
    command += ["--listen", address, "--ttl", str(ttl), "--check-interval", str(check_interval)]
    command += ["--heartbeat", str(heartbeat)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "controller.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), timeout=0.2).close()
            except OSError:
                return False
            return (state / "tls" / "ca.pem").exists() and admin.admin_socket(state).exists()

        wait_for("the simulated controller", up)
        yield state, address, proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
