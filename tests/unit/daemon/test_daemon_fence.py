"""The daemon's fence: the lease, until a little before the stop bound ends."""

from __future__ import annotations

import pytest

from orchestrator.daemon.fence import StopFence, park_allowance
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch


class Leases:
    def __init__(self) -> None:
        self.held = {"sim": True, "aws": False}

    def gate(self, provider: str) -> Epoch:
        if not self.held[provider]:
            raise LeaseLost(f"lease for provider {provider!r} is not held")
        return Epoch(2, 1)

    def valid(self, provider: str) -> bool:
        return self.held[provider]


def test_park_allowance_is_a_third_of_the_bound_at_most_30s() -> None:
    assert park_allowance(9.0) == 3.0
    assert park_allowance(90.0) == 30.0
    assert park_allowance(600.0) == 30.0


def test_open_while_running_then_closed_before_the_stop_bound_ends() -> None:
    now = [100.0]
    window: list[tuple[float, float] | None] = [None]
    fence = StopFence(Leases(), lambda: window[0], clock=lambda: now[0])
    assert fence.gate("sim") == Epoch(2, 1) and fence.valid("sim")
    assert not fence.valid("aws")
    with pytest.raises(LeaseLost, match="not held"):
        fence.gate("aws")
    # SIGTERM at 100 with stop_timeout 90: the op in flight may go on until 100 + 90 - 30.
    window[0] = (100.0, 90.0)
    assert fence.closes_at() == 160.0
    now[0] = 159.9
    assert fence.valid("sim") and fence.gate("sim") == Epoch(2, 1)
    now[0] = 160.0
    assert not fence.valid("sim")
    with pytest.raises(LeaseLost, match="the daemon is stopping and its stop_timeout is nearly over"):
        fence.gate("sim")
