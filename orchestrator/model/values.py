"""What a configuration document may hold: plain data whose numbers are finite and exact.

YAML gives more than a configuration means. ``.nan`` and ``.inf`` are floats, an integer has
no bound, an unquoted ``2024-01-01`` is a date and ``2024-01-01T10:00:00Z`` a timestamp,
``!!binary`` is bytes and ``!!set`` a set. No key of ``xceprov.yaml`` takes any of these, and
passed on (to a clock, a Terraform variable, a rendered template, a JSON document) they become
a deadline that is never reached, an OverflowError or "not JSON serializable" deep inside a
verb. ``value_problems`` finds every one of them in a parsed document, each with its key path,
so that they are refused where the document is read, all at once. So is the ``CHANGE-ME`` mark
of a value left to fill in (``PLACEHOLDER``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator

# The largest integer every reader of the values holds exactly: JSON readers (Terraform's
# variables, the controller's documents) take numbers as 64-bit floats.
MAX_INTEGER = 2**53 - 1
# The mark of a value only the site knows in a starting configuration (``xceprov init --provider``):
# a document holding it anywhere is refused, naming each key, until every one is replaced.
PLACEHOLDER = "CHANGE-ME"


class OversizedNumber(str):
    """The text of a YAML integer too long to be any value (the loader keeps it as text, unconverted).

    Converting it could take seconds (or fail: Python refuses int strings of more than 4300
    digits); kept as text, it is refused with its key path like any other out-of-range number.
    """


def value_problems(value: object, path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(key.path, what is wrong)`` for every value in ``value`` that no configuration key takes."""
    return list(_walk(value, path))


def _walk(value: object, path: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    where = ".".join(path) or "(top level)"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = scalar_problem(key)
            if problem is not None:
                yield where, f"key {shown(key) if isinstance(key, str) else str(key)[:40]}: {problem}"
                continue
            yield from _walk(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, str(index)))
    else:
        problem = scalar_problem(value)
        if problem is not None:
            yield where, problem


def scalar_problem(value: object) -> str | None:
    """Why ``value`` (one YAML scalar) is no configuration value, or None when it may be one."""
    if isinstance(value, OversizedNumber):
        return f"the number {shown(value)} is out of range (at most {MAX_INTEGER} either side of 0)"
    if isinstance(value, str):
        # A path, name or value holding NUL cannot be passed to the system (open, exec) or a host.
        if "\0" in value:
            return "text holding a NUL character (\\0) is no value here"
        # `xceprov init --provider ...` marks what only the site knows; such a file is never used.
        if PLACEHOLDER in value:
            return f"{shown(value)}: a site-specific value to fill in (xceprov init marked it {PLACEHOLDER})"
        return None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if abs(value) > MAX_INTEGER:
            return f"the number {shown(value)} is out of range (at most {MAX_INTEGER} either side of 0)"
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return "not a number (.nan): give a finite number"
        if math.isinf(value):
            return "an infinite number (.inf, or too large for a number): give a finite number"
        return None
    if isinstance(value, datetime.date):  # a datetime is a date too
        kind = "timestamp" if isinstance(value, datetime.datetime) else "date"
        return f"a YAML {kind} ({value.isoformat()}) is no value here: quote it if text is meant"
    if isinstance(value, bytes):
        return "binary data (!!binary) is no value here"
    return f"a YAML {type(value).__name__} is no value here (only text, numbers, booleans, lists and mappings)"


def shown(value: object) -> str:
    """``value`` for an error line, at most about 40 characters (a 400-digit number is not echoed)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # str() of a huge int is slow, and refused past 4300 digits: say its size instead.
        return f"(an integer of {value.bit_length()} bits)"
    text = str(value) if isinstance(value, int | OversizedNumber) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
