"""The loop's small state documents (breakers, bootstrap records): versioned JSON, replaced whole.

``{"format": N, "<member>": {name: entry}}``, kept through the documents seam
(:mod:`orchestrator.workspace.documents`: a 0600 file under the state directory replaced
atomically and durably, or the shared store's row), so a crash leaves the old document or the
new one, never a torn one. A document that does not parse, or of another format, is one line
naming it and what removing it does: the daemon never guesses at a state it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.workspace.documents import Document, json_body

T = TypeVar("T")


def read_entries(
    document: Document, fmt: int, member: str, parse: Callable[[str, Any], T], what: str, if_removed: str
) -> dict[str, T]:
    """``parse(name, entry)`` for every entry of ``member``; empty when the document is absent."""
    raw = document.read()
    if raw is None:
        return {}
    return parse_entries(document, raw, fmt, member, parse, what, if_removed)


def parse_entries(
    document: Document, raw: bytes, fmt: int, member: str, parse: Callable[[str, Any], T], what: str, if_removed: str
) -> dict[str, T]:
    """:func:`read_entries` of the content ``raw`` already read from ``document``."""
    try:
        doc = durable.parse_json(raw)
        if doc.get("format") != fmt:
            raise ValueError(f"format {doc.get('format')!r}, expected {fmt}")
        return {str(name): parse(str(name), entry) for name, entry in doc[member].items()}
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise FinalError(f"{document}: not a {what} ({exc}); fix or remove it ({if_removed})") from None


def write_entries(document: Document, fmt: int, member: str, entries: Mapping[str, Any]) -> None:
    """Replace the document with ``entries`` (by name), atomically and durably."""
    document.write(json_body({"format": fmt, member: {k: entries[k] for k in sorted(entries)}}))
