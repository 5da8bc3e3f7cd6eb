"""Exponential backoff with jitter: the one helper of every retried thing of the toolkit.

``ceiling(n) = min(maximum, initial · factor^(n−1))`` for failure number ``n`` (1 = the first),
and the wait is drawn uniformly from ``[(1 − jitter) · ceiling, ceiling]``. With the default
``jitter = 0.5`` that is the upper half ("equal jitter"): a floor under every wait, so a failing
cloud or controller is never hammered, and a random half that spreads orchestrators, templates or
clients that failed together.

Two ways to use it, one arithmetic:

- pure, as the reconcile loop does (:meth:`Backoff.delay` of an attempt count it keeps itself,
  with the loop's own random source, on the loop's injected clock; ``policy.retry`` through
  :meth:`Backoff.from_settings`);
- counting, as the controller link's reconnects and the fact reader's refused reads do
  (:meth:`Backoff.next_delay` counts one failure, :meth:`Backoff.reset` after a success).

A small helper rather than a retry library: none of these is a retried function call (the
reconnect loop rotates through addresses, follows redirects and stops at once on close; the
loop schedules retries on its own clock), so each only needs "how long to wait after failure n",
which is easy to test with a seeded random source.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from orchestrator.model.config import RetrySettings


@dataclass
class Backoff:
    """Delays from ``initial`` growing by ``factor`` up to ``maximum``, jittered downwards by at most
    ``jitter`` (a fraction of the delay); ``attempt`` counts the failures :meth:`next_delay` saw."""

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

    @classmethod
    def from_settings(cls, settings: RetrySettings) -> Backoff:
        """The backoff of ``policy.retry``."""
        return cls(settings.base, settings.max)

    def ceiling(self, attempt: int) -> float:
        """The longest delay after failure number ``attempt`` (1 = the first failure)."""
        exponent = min(max(attempt, 1) - 1, 62)  # factor**62 · initial is beyond any cap; no overflow
        return min(self.maximum, self.initial * (self.factor**exponent))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait after failure number ``attempt``: uniform in ``[(1 - jitter) · ceiling, ceiling]``
        (``rng``: the caller's random source, this backoff's own when None)."""
        top = self.ceiling(attempt)
        return (rng or self.rng).uniform((1 - self.jitter) * top, top)

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one failed attempt."""
        self.attempt += 1
        return self.delay(self.attempt)

    def reset(self) -> None:
        """Back to the first delay (after a success)."""
        self.attempt = 0
