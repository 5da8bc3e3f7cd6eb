"""The loop's small state documents (breakers, bootstrap records): versioned JSON, replaced whole.

``{"format": N, "<member>": {name: entry}}``, kept through the documents seam
(:mod:`orchestrator.workspace.documents`: a 0600 file under the state directory replaced
atomically and durably, or the shared store's row), so a crash leaves the old document or the
new one, never a torn one. A document that does not parse, or of another format, is one line
naming it and what removing it does: the daemon never guesses at a state it cannot read.

Several orchestrators of a cluster keep their records in one such document, so a writer changes
it only by :func:`update_entries`: its change applied to the entries as they are at that moment,
in turn with every other writer's (``Document.update``), never a copy read earlier written back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.workspace.documents import Change, Document, json_body

T = TypeVar("T")

# A change of the entries: the entries now -> the entries to store, or None to leave them.
EntriesChange = Callable[[dict[str, T]], dict[str, T] | None]


@dataclass(frozen=True)
class EntryFormat(Generic[T]):
    """How one kind of state document keeps its entries: format number, member, each entry's
    parsing and JSON form, and what a message says about the document."""

    fmt: int
    member: str
    parse: Callable[[str, Any], T]
    dump: Callable[[T], Any]
    what: str
    if_removed: str

    def entries(self, document: Document, raw: bytes | None) -> dict[str, T]:
        """``parse(name, entry)`` for every entry of the content ``raw`` of ``document`` (None:
        absent, no entries); one line naming the document when it is not of this format."""
        if raw is None:
            return {}
        try:
            doc = durable.parse_json(raw)
            if doc.get("format") != self.fmt:
                raise ValueError(f"format {doc.get('format')!r}, expected {self.fmt}")
            return {str(name): self.parse(str(name), entry) for name, entry in doc[self.member].items()}
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise FinalError(f"{document}: not a {self.what} ({exc}); fix or remove it ({self.if_removed})") from None

    def body(self, entries: dict[str, T]) -> bytes:
        """The document holding ``entries``."""
        return json_body({"format": self.fmt, self.member: {k: self.dump(entries[k]) for k in sorted(entries)}})

    def step(self, document: Document, change: EntriesChange[T]) -> Change:
        """The document change (``Document.update``) that applies ``change`` to its entries."""

        def apply(raw: bytes | None) -> bytes | None:
            changed = change(self.entries(document, raw))
            return None if changed is None else self.body(changed)

        return apply


def update_entries(document: Document, form: EntryFormat[T], change: EntriesChange[T]) -> dict[str, T]:
    """Apply ``change`` to the entries as the document holds them now and store what it
    returns, in turn with every other writer of the document; the entries after.

    ``change`` runs while other writers of the document wait: it only computes.
    """
    return form.entries(document, document.update(form.step(document, change)))
