"""The worker role of the simulated node manager: join the controller as a worker and heartbeat.

Stdlib + pycapnp only (shipped in the artifact). One connection at a time: the controller
addresses are tried in turn with backoff and jitter, a ``notPrimary`` error is followed to the
primary it names, and after every reconnect the worker joins again (the controller matches it
to its expected host by instance id, else by host name). A refused join (decommissioned host)
or a ``workerStop`` push ends the worker with ``EXIT_REFUSED``; SIGTERM ends it with 0.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import signal
import socket
import ssl
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from . import joinresult
from .codes import EXIT_CONFIG, EXIT_REFUSED
from .config import ConfigProblem, NodeConfig, load, read_join_token, split_address
from .wire import WireError, connect, recv_frame, send_frame, tls_context

log = logging.getLogger("xce-worker")
VERSION = "sim-0.1.0"
TRAVERSAL_LIMIT_WORDS = 8 * 1024 * 1024


def load_schema() -> Any:
    """The provisioner schema: the copy bundled next to this file, else the source tree's module."""
    bundled = Path(__file__).with_name("provisioner.capnp")
    if bundled.is_file():
        import capnp

        return capnp.load(str(bundled))
    # Running from the source tree: share the one loaded module (loading twice aborts pycapnp).
    from orchestrator.protocol.schema import schema

    return schema


class Refused(Exception):
    """The controller refused this host (decommissioned): do not rejoin."""


class Worker:
    """One worker role process."""

    def __init__(self, config: NodeConfig, schema: Any, join_result: Path | None = None) -> None:
        self.config = config
        self.schema = schema
        self.join_result = join_result
        self.stop = threading.Event()
        self.sock: ssl.SSLSocket | None = None
        self.next_id = 0
        self.rng = random.Random()
        self.joined = False

    # -- messages ------------------------------------------------------------------------------

    def _send(self, sock: ssl.SSLSocket, **member: Any) -> int:
        self.next_id += 1
        msg = self.schema.Envelope.new_message(requestId=self.next_id, **member)
        send_frame(sock, msg.to_bytes())
        return self.next_id

    def _decode(self, data: bytes) -> tuple[int, str, dict[str, Any]]:
        with self.schema.Envelope.from_bytes(
            data, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS, nesting_limit=64
        ) as env:
            which = str(env.which())
            body: dict[str, Any] = {}
            if which == "joined":
                body = {
                    "primary": env.joined.primary,
                    "term": env.joined.term,
                    "heartbeat_ms": env.joined.heartbeatIntervalMs,
                    "state": str(env.joined.hostState),
                }
            elif which == "error":
                body = {"code": str(env.error.code), "message": env.error.message, "redirect": env.error.redirect}
            elif which == "workerStop":
                body = {"reason": env.workerStop.reason}
            return int(env.requestId), which, body

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        """Connect, join and heartbeat until stopped; the process exit status."""
        delay = 0.2
        redirect: str | None = None
        index = 0
        while not self.stop.is_set():
            if redirect:
                address, redirect = redirect, None
            else:
                address = self.config.addresses[index % len(self.config.addresses)]
                index += 1
            try:
                redirect = self._session(address)
                delay = 0.2
                if redirect:
                    continue
            except Refused as exc:
                log.error("controller refused this host: %s", exc)
                if not self.joined:
                    joinresult.write(self.join_result, joinresult.REFUSED, str(exc), joinresult.refusal_code(str(exc)))
                return EXIT_REFUSED
            except (OSError, WireError, ssl.SSLError, ConfigProblem) as exc:
                log.warning("controller %s: %s", address, exc)
                self._no_join(f"controller {address}: {exc}")
            except Exception as exc:  # garbage from the controller: log, reconnect
                log.warning("controller %s: bad message: %s: %s", address, type(exc).__name__, exc)
                self._no_join(f"controller {address}: bad message: {type(exc).__name__}: {exc}")
            if self.stop.wait(self.rng.uniform(delay / 2, delay)):
                break
            delay = min(delay * 2, 5.0)
        return 0

    def _no_join(self, message: str) -> None:
        """A failed attempt: recorded unless this worker joined already (a later reconnect is not
        the boot's join outcome)."""
        if not self.joined:
            joinresult.write(self.join_result, joinresult.ERROR, message)

    def _session(self, address: str) -> str | None:
        """One connection: join, then heartbeat; returns a redirect address, or raises."""
        cfg = self.config
        host, port = split_address(address)
        # Read at every connection: a re-run bootstrap may have installed a new token.
        token = read_join_token(cfg.join_token_file)
        ctx = tls_context(cfg.ca_file, cfg.client_cert, cfg.client_key)
        sock = connect(host, port, ctx, cfg.server_name, timeout=5.0)
        self.sock = sock
        try:
            own = sock.getsockname()[0]
            slots = cfg.xce.get("slots", 1)
            join_id = self._send(
                sock,
                joinWorker={
                    "hostName": cfg.host_name,
                    "instanceId": cfg.instance_id,
                    "instanceKey": cfg.instance_key,
                    "opId": cfg.op_id,
                    "template": cfg.template,
                    "address": own,
                    "version": VERSION,
                    "slots": slots if isinstance(slots, int) else 1,
                    "joinToken": token,
                },
            )
            sock.settimeout(10.0)
            rid, which, body = self._decode(recv_frame(sock, cfg.max_frame_bytes))
            while rid != join_id:  # a push that raced the reply
                rid, which, body = self._decode(recv_frame(sock, cfg.max_frame_bytes))
            if which == "error":
                if body["code"] == "notPrimary" and body["redirect"]:
                    log.info("controller %s is not the primary; following to %s", address, body["redirect"])
                    return str(body["redirect"])
                if body["code"] == "refused":
                    raise Refused(body["message"])
                raise WireError(f"join failed: {body['code']}: {body['message']}")
            if which != "joined":
                raise WireError(f"unexpected reply to join: {which}")
            log.info(
                "joined controller %s as %s (term %s, state %s)", address, cfg.host_name, body["term"], body["state"]
            )
            if not self.joined:
                self.joined = True
                joinresult.write(self.join_result, joinresult.JOINED, f"joined controller {address} as {cfg.host_name}")
            interval = body["heartbeat_ms"] / 1000.0 if body["heartbeat_ms"] else cfg.heartbeat_interval
            return self._heartbeat(sock, interval)
        finally:
            self.sock = None
            with contextlib.suppress(OSError):
                sock.close()

    def _heartbeat(self, sock: ssl.SSLSocket, interval: float) -> str | None:
        inbox: queue.Queue[tuple[int, str, dict[str, Any]] | Exception] = queue.Queue()
        sock.settimeout(None)

        def reader() -> None:
            try:
                while True:
                    inbox.put(self._decode(recv_frame(sock, self.config.max_frame_bytes)))
            except Exception as exc:
                inbox.put(exc)

        threading.Thread(target=reader, name="worker-reader", daemon=True).start()
        while not self.stop.is_set():
            self._send(sock, heartbeat={"hostName": self.config.host_name, "runningJobs": 0})
            try:
                item = inbox.get(timeout=interval)
            except queue.Empty:
                continue
            while True:
                if isinstance(item, Exception):
                    if self.stop.is_set():
                        return None
                    raise item
                _, which, body = item
                if which == "workerStop":
                    raise Refused(f"stopped by the controller: {body['reason']}")
                if which == "error":
                    if body["code"] == "notPrimary" and body["redirect"]:
                        return str(body["redirect"])
                    if body["code"] in ("refused", "notJoined"):
                        raise WireError(f"heartbeat refused: {body['code']}: {body['message']}")
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
            self.stop.wait(interval)
        return None

    def shutdown(self) -> None:
        """Stop (from a signal handler): end the loop and close the socket."""
        self.stop.set()
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def run_worker(config_path: Path, join_result: Path | None = None) -> int:
    """Entry of ``xce-node-manager worker``: the exit status."""
    try:
        config = load(config_path)
    except ConfigProblem as exc:
        log.error("%s", exc)
        joinresult.write(join_result, joinresult.ERROR, str(exc), "config")
        return EXIT_CONFIG
    worker = Worker(config, load_schema(), join_result)

    def on_term(signum: int, frame: FrameType | None) -> None:
        worker.shutdown()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    return worker.run()
