"""Fixtures of the controller link tests: a test PKI and a scriptable TLS controller."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.protocol import tls
from orchestrator.sim import pki as sim_pki

# --import-mode=importlib: make the helper module next to this file importable by the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctlfake import FakeController, Pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = sim_pki.make_ca()
    ca.write(d / "ca.pem", d / "ca.key")
    sim_pki.make_ca("another CA").write(d / "other.pem", d / "other.key")
    sim_pki.issue_cert(ca, "controller", ["localhost", "127.0.0.1"]).write(d / "server.pem", d / "server.key")
    return Pki(d / "ca.pem", d / "other.pem", tls.server_context(d / "server.pem", d / "server.key"))


@pytest.fixture
def fake(pki: Pki) -> Iterator[FakeController]:
    ctl = FakeController(pki.server_ctx)
    try:
        yield ctl
    finally:
        ctl.close()
