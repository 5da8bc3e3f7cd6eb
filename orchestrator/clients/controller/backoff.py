"""Exponential backoff with full jitter for reconnects.

A small helper instead of ``tenacity`` because the link's reconnect loop is not a retried
function call: it rotates through addresses, follows redirects and must stop at once on close,
so it only needs "how long to wait before attempt n", which is easy to test with a seeded RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays ``initial * factor**n`` capped at ``maximum``, each drawn uniformly from
    ``[(1 - jitter) * d, d]`` so that many clients reconnecting after a failover spread out."""

    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial or self.factor < 1:
            raise ValueError("backoff needs 0 < initial <= maximum and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within [0, 1]")

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one failed attempt."""
        ceiling = min(self.maximum, self.initial * self.factor ** min(self.attempt, 64))
        self.attempt += 1
        return self.rng.uniform((1 - self.jitter) * ceiling, ceiling)

    def reset(self) -> None:
        """Back to the first delay (after a successful connection)."""
        self.attempt = 0
