"""Durations in configuration: a number of seconds or a string such as ``90s``, ``15m``, ``2h``."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: object) -> float:
    """Return seconds for ``value``; raise ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30, '30s', '15m' or '2h'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"{value!r} is not a duration such as 30, '30s', '15m' or '2h'")
    if seconds < 0:
        raise ValueError(f"duration {value!r} is negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
