"""Helpers of the daemon tests: a small valid configuration, a notify socket stand-in, a pass report."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.reconcile.report import PassReport

SITE = """
cluster: {cluster}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""


def site_text(cluster: str = "site1", daemon: str = "") -> str:
    """A valid configuration; ``daemon`` is the YAML of a ``daemon:`` section (flow style) or empty."""
    return SITE.format(cluster=cluster) + (f"daemon: {daemon}\n" if daemon else "")


def loaded(daemon: str = "", cluster: str = "site1") -> LoadedConfig:
    """``site_text`` validated as if read from ``site.yaml``."""
    return parse_config(site_text(cluster, daemon), "site.yaml", Path("/srv/site"))


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket."""

    def __init__(self, sock: socket.socket, env_value: str) -> None:
        self.sock = sock
        self.env_value = env_value

    def receive(self, timeout: float = 10.0) -> dict[str, str]:
        """The next datagram as its ``KEY=value`` lines."""
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n"))

    def drain(self) -> list[dict[str, str]]:
        """Every datagram queued now."""
        got = []
        self.sock.setblocking(False)
        while True:
            try:
                data = self.sock.recv(4096).decode()
            except BlockingIOError:
                return got
            got.append(dict(line.split("=", 1) for line in data.split("\n")))

    def nothing_waiting(self) -> bool:
        """True when no datagram is queued."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(4096)
        except BlockingIOError:
            return True
        return False


class Report(PassReport):
    """A pass report of a stand-in reconciler: its trigger, no phases, no ops."""

    def __init__(self, trigger: str) -> None:
        now = time.time()
        super().__init__(trigger, now, now, [], {}, [], [])
