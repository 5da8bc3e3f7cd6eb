"""Fixtures of the daemon tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.protocol import tls
from orchestrator.sim import pki as sim_pki
from tests.unit.clients.controller.ctlfake import FakeController
from tests.unit.daemon.daemon_helpers import NotifySocket


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    """A notify socket at a path under ``tmp_path`` (``NOTIFY_SOCKET=/...``)."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    try:
        yield NotifySocket(sock, str(path))
    finally:
        sock.close()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A CA file and the fake controller's TLS context signed by it."""
    d = tmp_path_factory.mktemp("pki")
    authority = sim_pki.make_ca()
    authority.write(d / "ca.pem", d / "ca.key")
    sim_pki.issue_cert(authority, "controller", ["localhost", "127.0.0.1"]).write(d / "server.pem", d / "server.key")
    return d / "ca.pem", tls.server_context(d / "server.pem", d / "server.key")


@pytest.fixture
def fake(ca: tuple[Path, Any]) -> Iterator[FakeController]:
    """A scripted controller (the link tests' fake) with no facts and no hosts."""
    controller = FakeController(ca[1])
    controller.handlers["queryFacts"] = lambda _m, p, _c: ("factList", {"provider": p["provider"], "facts": []})
    controller.handlers["hostStatus"] = lambda *_: ("hostList", {"hosts": []})
    try:
        yield controller
    finally:
        controller.close()
