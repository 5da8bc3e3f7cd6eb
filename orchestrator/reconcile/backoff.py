"""Exponential backoff with jitter, as a pure function of the attempt and a random source.

``delay(n) = min(max, base · 2^(n−1))`` drawn from ``[delay/2, delay]`` ("equal jitter"): the
upper half keeps a floor under every wait, so a failing cloud is never hammered, and the random
half spreads orchestrators (or templates) that failed together. tenacity's
``wait_exponential_jitter`` adds its jitter on top of the exponential and needs tenacity's
retry state; the loop schedules retries on its own injected clock, so it calls this instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from orchestrator.model.config import RetrySettings


@dataclass(frozen=True)
class Backoff:
    """Delays for ``base``, ``cap`` (the configured ``policy.retry``) and a random source."""

    base: float
    cap: float

    @classmethod
    def from_settings(cls, settings: RetrySettings) -> Backoff:
        """The backoff of ``policy.retry``."""
        return cls(settings.base, settings.max)

    def ceiling(self, attempt: int) -> float:
        """The longest delay after failure number ``attempt`` (1 = the first failure)."""
        exponent = min(max(attempt, 1) - 1, 62)  # 2**62 · base is beyond any cap; no overflow
        return min(self.cap, self.base * (2.0**exponent))

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait after failure number ``attempt``: uniform in ``[ceiling/2, ceiling]``."""
        top = self.ceiling(attempt)
        return rng.uniform(top / 2, top)
