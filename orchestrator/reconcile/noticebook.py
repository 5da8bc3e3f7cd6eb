"""The hosts the daemon acted on an interruption notice for: closed at the controller, leaving.

One entry per noticed instance (docs/daemon.md, "Spot interruption notices"), written by the
daemon's notice watch (``daemon/noticewatch.py``) when it has told the controller, read by

* the pass (``passctx.read_inputs``): a noticed host is *leaving*, no longer supply; the gap
  counts it out until the demand snapshot reflects the notice (``gap.py``, ``leaving``), so the
  pass asks for its replacement;
* the status file and ``xceprov status`` (``notices``), and the watch itself after a restart:
  a notice acted on is never acted on twice, and its loss is recorded once (``lost_at``).

The document is ``notices.json`` of the cluster's documents (``workspace.sharedstore.
cluster_documents``: a file under the state directory, or the shared store's row), changed with
``Document.update`` so two writers never undo each other. Bounded: an entry goes an hour after
its loss was recorded, or a day after its reclaim time; at most :data:`MAX_ENTRIES` are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from orchestrator.durable import parse_json
from orchestrator.errors import XceprovError
from orchestrator.model.config import Config
from orchestrator.workspace.documents import Document, Documents, json_body
from orchestrator.workspace.sharedstore import cluster_documents

NOTICES_FILE: Final = "notices.json"
MAX_ENTRIES: Final = 10_000
KEEP_AFTER_LOSS: Final = 3600.0
KEEP_AFTER_RECLAIM: Final = 86400.0
# A noticed host still there this long after its reclaim time is no longer held by the notice.
RECLAIM_GRACE: Final = 600.0
_FORMAT: Final = 1


@dataclass(frozen=True)
class NoticedHost:
    """One instance acted on: what the cloud said, what the controller answered, when it went.

    Times are Unix seconds: ``noticed_at`` and ``reclaim_at`` the cloud's, ``acted_at`` when the
    controller acknowledged (this host's clock), ``controller_at`` the ack's time by the
    controller's clock (0: no ack; compared with the demand snapshot's time), ``lost_at`` when
    the loss was recorded (None: not yet).
    """

    provider: str
    instance_id: str
    kind: str
    noticed_at: float
    reclaim_at: float
    acted_at: float
    instance_key: str = ""
    template: str = ""
    host_name: str = ""
    host_state: str = ""
    controller_at: float = 0.0
    lost_at: float | None = None

    @property
    def closed_seconds(self) -> float:
        """From the cloud's notice to the host closed at the controller."""
        return max(0.0, self.acted_at - self.noticed_at)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (the document's entry and the status file's ``notices`` item)."""
        return {**asdict(self), "closed_seconds": round(self.closed_seconds, 3)}


class NoticeBook:
    """The noticed hosts kept in a document (see the module docstring)."""

    def __init__(self, documents: Documents) -> None:
        self.document = Document(documents, NOTICES_FILE)

    def entries(self) -> dict[str, NoticedHost]:
        """Instance id -> its entry (an unreadable document holds none: logged by nobody, it is
        rewritten whole at the next change)."""
        return _read(self.document.read())

    def record(self, host: NoticedHost) -> bool:
        """Add ``host``; False when an entry of the instance is there already (acted on before)."""
        added: list[bool] = []

        def change(entries: dict[str, NoticedHost]) -> dict[str, NoticedHost] | None:
            if host.instance_id in entries:
                return None
            added.append(True)
            return {**entries, host.instance_id: host}

        self._update(change)
        return bool(added)

    def lost(self, instance_ids: Iterable[str], at: float) -> None:
        """The loss of these instances was recorded at ``at``."""
        wanted = set(instance_ids)

        def change(entries: dict[str, NoticedHost]) -> dict[str, NoticedHost] | None:
            hit = {i: replace(e, lost_at=at) for i, e in entries.items() if i in wanted and e.lost_at is None}
            return {**entries, **hit} if hit else None

        self._update(change)

    def prune(self, now: float) -> None:
        """Forget entries past their keeping time."""

        def change(entries: dict[str, NoticedHost]) -> dict[str, NoticedHost] | None:
            kept = {i: e for i, e in entries.items() if not _expired(e, now)}
            return kept if len(kept) != len(entries) else None

        self._update(change)

    def _update(self, change: Callable[[dict[str, NoticedHost]], dict[str, NoticedHost] | None]) -> None:
        def step(raw: bytes | None) -> bytes | None:
            new = change(_read(raw))
            if new is None:
                return raw
            newest = sorted(new.values(), key=lambda e: e.acted_at)[-MAX_ENTRIES:]
            return json_body({"format": _FORMAT, "notices": [e.to_json() for e in newest]})

        self.document.update(step)


def noticed_rows(config: Config) -> list[dict[str, Any]]:
    """The noticed hosts of the cluster as the status file shows them, oldest first (none when
    the document cannot be read: the status is written all the same)."""
    try:
        entries = NoticeBook(cluster_documents(config)).entries()
    except XceprovError:
        return []
    return [e.to_json() for e in sorted(entries.values(), key=lambda e: e.acted_at)]


def leaving_keys(entries: Iterable[NoticedHost], now: float) -> dict[str, float]:
    """Instance key -> the controller's time of the notice, for noticed hosts not recorded lost
    and not past their reclaim time by :data:`RECLAIM_GRACE` (a notice the cloud did not carry
    out: the host is then a closed host, returned by the reclaim phase)."""
    return {
        e.instance_key: e.controller_at
        for e in entries
        if e.instance_key and e.lost_at is None and now < e.reclaim_at + RECLAIM_GRACE
    }


def _expired(entry: NoticedHost, now: float) -> bool:
    if entry.lost_at is not None and now - entry.lost_at > KEEP_AFTER_LOSS:
        return True
    return now - entry.reclaim_at > KEEP_AFTER_RECLAIM


_FIELDS: Final = frozenset(NoticedHost.__dataclass_fields__)


def _read(raw: bytes | None) -> dict[str, NoticedHost]:
    if raw is None:
        return {}
    try:
        doc = parse_json(raw)
        items = doc["notices"] if isinstance(doc, dict) and doc.get("format") == _FORMAT else []
        out: dict[str, NoticedHost] = {}
        for item in items[:MAX_ENTRIES]:
            entry = NoticedHost(**{k: v for k, v in item.items() if k in _FIELDS})
            out[entry.instance_id] = entry
        return out
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
