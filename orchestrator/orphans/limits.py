"""The orphan scan's rate limit and circuit breaker (policy.orphans).

Rate limit: at most ``max_cleanup_per_interval`` automatic actions per provider within any
``interval``. The times of past actions are kept in ``<state_dir>/orphans/actions.json`` (0600,
replaced atomically; with ``terraform.backend: pg`` the cluster's row of the shared store), so
the daemon's scans, a restart and the administrator's confirmations
(``xceprov orphans adopt|return``) all count against the same limit.

Breaker: when more than ``breaker_share`` of a provider's instances (and at least
``breaker_min``) look orphaned in one scan, a view is wrong, not the instances: no automatic
action on that provider this scan. It is judged afresh every scan (nothing to reset).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.model.config import OrphanSettings
from orchestrator.workspace.documents import Document, Documents, LocalDocuments, json_body

ACTIONS_FILE: Final = "orphans/actions.json"
_FORMAT: Final = 1
_MAX_ENTRIES: Final = 100_000


class RateLimit:
    """Past automatic actions per provider (persisted) and how many more the window allows."""

    def __init__(
        self, state_dir: Path, settings: OrphanSettings, now: float, documents: Documents | None = None
    ) -> None:
        """The limit kept under ``state_dir`` (or in ``documents``, the cluster's shared ones)."""
        self.document = Document(documents if documents is not None else LocalDocuments(Path(state_dir)), ACTIONS_FILE)
        self.limit = settings.max_cleanup_per_interval
        self.interval = float(settings.interval)
        self.now = now
        self._times = self._read()

    def _read(self) -> dict[str, list[float]]:
        return self._parse(self.document.read())

    def _parse(self, raw: bytes | None) -> dict[str, list[float]]:
        if raw is None:
            return {}
        try:
            doc: Any = durable.parse_json(raw)
        except (OSError, ValueError) as exc:
            raise FinalError(f"{self.document}: not JSON ({exc}); remove it to start counting afresh") from None
        times = doc.get("actions") if isinstance(doc, dict) and doc.get("format") == _FORMAT else None
        if not isinstance(times, dict) or not all(
            isinstance(v, list) and len(v) <= _MAX_ENTRIES and all(isinstance(t, (int, float)) for t in v)
            for v in times.values()
        ):
            raise FinalError(
                f"{self.document}: not an orphan actions file of format {_FORMAT}; remove it to start afresh"
            )
        return {str(k): [float(t) for t in v] for k, v in times.items()}

    def recent(self, provider: str) -> int:
        """Actions on ``provider`` within the last interval."""
        return sum(1 for t in self._times.get(provider, []) if self.now - t < self.interval)

    def remaining(self, provider: str) -> int:
        """How many more automatic actions the window allows on ``provider``."""
        return max(0, self.limit - self.recent(provider))

    def take(self, provider: str) -> None:
        """Count one action now (durable before the action: a crash never forgets one)."""

        # Over the document as it is at the write, in turn with every other writer: another
        # orchestrator's actions (its providers, in the shared store) and another scan's or
        # confirmation's stay counted.
        def count(raw: bytes | None) -> bytes:
            kept = {p: [t for t in ts if self.now - t < self.interval] for p, ts in self._parse(raw).items()}
            kept.setdefault(provider, []).append(self.now)
            return json_body({"format": _FORMAT, "actions": kept})

        self._times = self._parse(self.document.update(count))


@dataclass(frozen=True)
class Breaker:
    """One provider's breaker verdict this scan."""

    flagged: int
    instances: int
    share: float
    minimum: int

    @property
    def open(self) -> bool:
        """More than the share of the instances (and at least the minimum) look orphaned."""
        return self.flagged >= self.minimum and self.flagged > self.share * max(self.instances, 1)

    def to_json(self) -> dict[str, Any]:
        """The report's ``breaker`` object."""
        return {
            "open": self.open,
            "flagged": self.flagged,
            "instances": self.instances,
            "share": self.share,
            "min": self.minimum,
        }
