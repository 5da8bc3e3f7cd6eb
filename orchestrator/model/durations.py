"""Durations in configuration: a number of seconds or a string such as ``90s``, ``15m``, ``2h``.

A duration is finite, not negative and at most ``MAX_DURATION``: every duration ends up added
to a clock (a deadline, a lease's end, a wait), and a NaN compares false with everything (a
NaN ``idle_time`` makes every idle host look overdue, a NaN ``lease_margin`` a lease that
never runs out), an infinity or a number beyond the clock's range fails deep inside a verb.
"""

from __future__ import annotations

import datetime
import math
import re
import time
from typing import Annotated

from pydantic import BeforeValidator

from orchestrator.errors import UsageError
from orchestrator.model.values import shown

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_FORMS = "a duration such as 30, '30s', '15m' or '2h'"
# Ten years: far beyond any timeout, grace or lifetime a site means, far inside what clocks,
# timers and date arithmetic hold (a deadline ten years out is still a valid date and wait).
MAX_DURATION = 10 * 365 * 86400.0
MAX_DURATION_TEXT = "3650d (10 years)"


def parse_duration(value: object) -> float:
    """Return seconds for ``value``; raise ValueError saying what is wrong and the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"a boolean is not {_FORMS}")
    if isinstance(value, datetime.date):  # datetime is a date too
        kind = "timestamp" if isinstance(value, datetime.datetime) else "date"
        raise ValueError(f"a YAML {kind} ({value.isoformat()}) is not {_FORMS}")
    if isinstance(value, int):
        seconds = float(value) if abs(value) <= MAX_DURATION else math.inf  # a huge int overflows a float
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"{shown(value)} is not {_FORMS}")
    if math.isnan(seconds):
        raise ValueError(f"not a number (.nan) is not {_FORMS}")
    if seconds < 0:
        raise ValueError(f"duration {shown(value)} is negative")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration {shown(value)} is longer than the longest accepted, {MAX_DURATION_TEXT}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]

# ``--since WHEN`` of the commands that show a history: a bare number is a Unix time in seconds,
# a number with its unit a duration back from now.
_UNIX = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")
WHEN_FORMS = "a Unix time in seconds, or a duration back from now with its unit ('30m', '2h')"


def since_time(text: str, now: float) -> float:
    """The Unix time ``text`` names (``WHEN_FORMS``); ValueError saying the accepted forms."""
    if _UNIX.match(text):
        at = float(text)
        if math.isinf(at):
            raise ValueError(f"{shown(text)} is not {WHEN_FORMS}")
        return at
    try:
        return now - parse_duration(text)
    except ValueError:
        raise ValueError(f"{shown(text)} is not {WHEN_FORMS}") from None


def period_of(since: str | None, until: str | None, now: float | None = None) -> tuple[float, float]:
    """``[since, until)`` as Unix seconds from two WHEN options (``--since``, ``--until``): since
    defaults to the beginning (0), until to ``now``; a bad value or an empty period is one
    ``UsageError`` line naming the option and value."""
    now = time.time() if now is None else now

    def when(option: str, text: str) -> float:
        try:
            at = since_time(text, now)
        except ValueError:
            raise UsageError(f"bad {option} {text!r}: expected {WHEN_FORMS}") from None
        if not at >= 0:
            raise UsageError(f"bad {option} {text!r}: expected {WHEN_FORMS}")
        return at

    start = 0.0 if since is None else when("--since", since)
    end = now if until is None else when("--until", until)
    if end < start:
        raise UsageError(f"bad --until {until!r}: before --since {since!r}")
    return start, end
