"""The one backoff helper: grows, is capped, jitters downwards only, resets; counted and pure agree."""

from __future__ import annotations

import random

import pytest

from orchestrator.model.backoff import Backoff
from orchestrator.model.config import RetrySettings


def test_grows_to_the_cap_with_jitter_below_the_ceiling() -> None:
    b = Backoff(initial=0.1, maximum=1.0, factor=2.0, jitter=0.5, rng=random.Random(7))
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for ceiling in ceilings:
        d = b.next_delay()
        assert ceiling * 0.5 <= d <= ceiling


def test_reset_starts_over() -> None:
    b = Backoff(initial=0.5, maximum=4.0, jitter=0.0)
    assert [b.next_delay() for _ in range(3)] == [0.5, 1.0, 2.0]
    b.reset()
    assert b.next_delay() == 0.5


def test_many_attempts_do_not_overflow() -> None:
    b = Backoff(initial=0.1, maximum=3.0, jitter=0.0)
    for _ in range(10_000):
        d = b.next_delay()
    assert d == 3.0


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"maximum": 0.01}, {"factor": 0.5}, {"jitter": 2}])
def test_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_counting_and_pure_use_give_the_same_waits() -> None:
    # The link counts its failures (next_delay); the reconcile loop passes its own count and random
    # source (delay): one arithmetic, so the same seed gives the same waits.
    counted = Backoff(initial=1.0, maximum=300.0, rng=random.Random(3))
    pure, rng = Backoff(1.0, 300.0), random.Random(3)
    assert [counted.next_delay() for _ in range(12)] == [pure.delay(n, rng) for n in range(1, 13)]


def test_policy_retry_draws_from_the_upper_half() -> None:
    backoff = Backoff.from_settings(RetrySettings(base=10, max=60))
    assert [backoff.ceiling(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    rng = random.Random(5)
    assert all(30 <= backoff.delay(4, rng) <= 60 for _ in range(100))
