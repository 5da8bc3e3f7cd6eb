"""The loop's small state files (breakers, bootstrap records): versioned JSON, 0600, atomic.

``{"format": N, "<member>": {name: entry}}``, replaced atomically and durably
(:mod:`orchestrator.durable`), so a crash leaves the old file or the new one, never a torn one.
A file that does not parse, or of another format, is one line naming it and what removing it
does: the daemon never guesses at a state it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from orchestrator import durable
from orchestrator.errors import FinalError

T = TypeVar("T")


def read_entries(
    path: Path, fmt: int, member: str, parse: Callable[[str, Any], T], what: str, if_removed: str
) -> dict[str, T]:
    """``parse(name, entry)`` for every entry of ``member``; empty when the file is absent."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        doc = durable.parse_json(raw)
        if doc.get("format") != fmt:
            raise ValueError(f"format {doc.get('format')!r}, expected {fmt}")
        return {str(name): parse(str(name), entry) for name, entry in doc[member].items()}
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise FinalError(f"{path}: not a {what} ({exc}); fix or remove it ({if_removed})") from None


def write_entries(path: Path, fmt: int, member: str, entries: Mapping[str, Any]) -> None:
    """Replace the file with ``entries`` (by name), atomically and durably, 0600."""
    durable.write_json_atomic(path, {"format": fmt, member: {k: entries[k] for k in sorted(entries)}})
