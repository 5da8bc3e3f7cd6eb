"""Make ``tests/`` importable (the shared test helpers live there); the core's fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[3])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from sim_controller_helpers import ProtoClient  # noqa: E402
from simctl_fakes import new_core  # noqa: E402

from orchestrator.sim.controller.clock import FakeClock  # noqa: E402
from orchestrator.sim.controller.core import ControllerCore  # noqa: E402
from orchestrator.sim.controller.store import ControllerStore  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test says so."""
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ControllerStore]:
    """A controller store in the test's directory."""
    s = ControllerStore(tmp_path)
    yield s
    s.close()


@pytest.fixture
def core(store: ControllerStore, clock: FakeClock) -> ControllerCore:
    """A controller core over ``store``."""
    return new_core(store, clock)


@pytest.fixture
def clients() -> Iterator[list[ProtoClient]]:
    """Protocol clients a test opens (append them): all closed at its end."""
    out: list[ProtoClient] = []
    yield out
    for c in out:
        c.close()
