"""``python -m orchestrator.sim.controller serve --state-dir DIR --listen HOST:PORT [...]``.

Runs the simulated controller in the foreground until SIGTERM/SIGINT or an admin shutdown.
TLS files and the worker join key are made under ``<state-dir>/tls`` when missing (server SANs:
localhost, 127.0.0.1 and every listen address). Client certificates are verified against the CA
there (they name the provisioner and admin roles; workers present join tokens instead). The
admin channel is ``<state-dir>/controller.sock``; the pid is written to
``<state-dir>/controller.pid`` while running (``xceprov sim up`` keeps its own pid file too).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from orchestrator.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from orchestrator.protocol.jointoken import read_join_key
from orchestrator.protocol.tls import server_context
from orchestrator.sim.controller.admin import admin_socket
from orchestrator.sim.controller.clock import SystemClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.server import ConnectionLimits, ControllerServer, parse_address
from orchestrator.sim.controller.store import ControllerStore
from orchestrator.sim.pki import ensure_server_tls

PID_NAME = "controller.pid"


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m orchestrator.sim.controller", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the simulated controller in the foreground")
    s.add_argument("--state-dir", required=True, type=Path)
    s.add_argument("--listen", action="append", default=[], metavar="HOST:PORT", help="repeatable")
    s.add_argument("--ttl", type=float, default=15.0, help="lease TTL in seconds (default 15)")
    s.add_argument("--check-interval", type=float, default=1.0, help="seconds between checks (default 1)")
    s.add_argument("--heartbeat", type=float, default=5.0, help="worker heartbeat interval in seconds")
    s.add_argument("--redirect", default="", metavar="HOST:PORT", help="run as a standby redirecting here")
    s.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES)
    s.add_argument("--max-connections", type=int, default=512)
    limits = ConnectionLimits()
    s.add_argument("--max-per-peer", type=int, default=limits.max_per_peer, help="TLS connections per address")
    s.add_argument("--max-unjoined", type=int, default=limits.max_unjoined, help="connections not joined yet")
    s.add_argument("-v", "--verbose", action="count", default=0)
    return p


def serve(args: argparse.Namespace) -> int:
    """Run until stopped; returns the exit code."""
    level = logging.DEBUG if args.verbose > 1 else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # basicConfig does nothing when logging was configured already; the level must still apply.
    logging.getLogger("orchestrator.sim.controller").setLevel(level)
    listen = [parse_address(a) for a in (args.listen or ["127.0.0.1:7441"])]
    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    names = [h for h, _ in listen if h not in ("0.0.0.0", "::")]
    files = ensure_server_tls(state_dir / "tls", names)
    # Client certificates are optional at the TLS level (workers have none) and required by the
    # joins and the admin requests (orchestrator.sim.controller.auth).
    tls = server_context(files.server_cert, files.server_key, client_ca_file=files.ca_cert)
    store = ControllerStore(state_dir)
    core = ControllerCore(
        store,
        SystemClock(),
        ttl=args.ttl,
        check_interval=args.check_interval,
        heartbeat_interval=args.heartbeat,
        redirect=args.redirect,
        join_key=read_join_key(files.join_key),
    )
    server = ControllerServer(
        core,
        tls,
        listen,
        admin_path=admin_socket(state_dir),
        max_frame_bytes=args.max_frame_bytes,
        max_connections=args.max_connections,
        limits=ConnectionLimits(max_per_peer=args.max_per_peer, max_unjoined=args.max_unjoined),
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    pid_file = state_dir / PID_NAME
    server.start()
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        while not server.wait(1.0):
            pass
    finally:
        server.stop()
        store.close()
        with contextlib.suppress(FileNotFoundError):
            if pid_file.read_text().strip() == str(os.getpid()):
                pid_file.unlink()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
