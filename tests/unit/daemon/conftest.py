"""Fixtures of the daemon tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

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
