"""Bootstrap attempts and outcomes per host, kept across restarts.

The bootstrap phase of a pass asks :class:`BootstrapTracker` which expected hosts are due
(never tried, or failed and past their backoff), records every outcome, and learns from it
whether a failed host is tried again (after an exponential backoff with jitter, up to
``policy.retry.attempts`` attempts) or given up (returned, counted by the template's breaker).
The join-tracking phase records a host's first join here too, so a join counts toward closing
the breaker exactly once.

The records live in ``<state_dir>/bootstrap.json`` (0600, replaced atomically and durably; with
``terraform.backend: pg`` the cluster's row of the shared store, where every orchestrator of the
cluster records its own providers' hosts), so a restarted daemon neither bootstraps a host that
already succeeded nor forgets how often a failing one was tried. A host whose play was stopped
(the daemon's SIGTERM) is recorded as not bootstrapped, with no attempt counted and no backoff
(:meth:`BootstrapTracker.stopped`): the next start bootstraps it again. Records of hosts that are
gone are dropped (:meth:`BootstrapTracker.prune`). Every change is applied to the records as the
document holds them at that moment, in turn with every other writer
(``statefile.update_entries``): a record another orchestrator wrote is never lost to this one's
older copy. Times are wall-clock seconds from the caller's injected clock.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

from orchestrator.model.backoff import Backoff
from orchestrator.reconcile.statefile import EntryFormat, update_entries
from orchestrator.workspace.documents import Document, Documents, LocalDocuments

BOOTSTRAP_FILE: Final = "bootstrap.json"
_FORMAT: Final = 1
OK: Final = "ok"


@dataclass(frozen=True)
class BootstrapRecord:
    """One host's bootstrap history."""

    key: str
    provider: str
    template: str
    host_name: str
    attempts: int = 0
    outcome: str = ""  # "" never tried, "ok", or the last failure's one line
    last_at: float = 0.0
    next_at: float = 0.0  # a failed host is not tried again before this
    gave_up: bool = False  # attempts exhausted: the host is (being) returned
    joined: bool = False  # the controller saw its worker join (counted once for the breaker)
    # A first-boot host (``bootstrap.mode: first-boot``, no play): its outcome as last read from
    # its console or the controller (``model.firstboot.FirstBootKind``; "" for a pushed host),
    # and that outcome's line (the failed step and the host's message).
    first_boot: str = ""
    first_boot_line: str = ""

    @property
    def ok(self) -> bool:
        """The last bootstrap succeeded."""
        return self.outcome == OK

    def due(self, now: float) -> bool:
        """Whether the host should be bootstrapped now."""
        return not self.ok and not self.gave_up and not self.joined and now >= self.next_at

    def evidence(self) -> dict[str, Any]:
        """JSON-ready, for the audit log and status."""
        return asdict(self)


@dataclass(frozen=True)
class Attempt:
    """What one recorded outcome means for the host."""

    record: BootstrapRecord
    action: str  # "done" | "retry" | "give-up"


class BootstrapTracker:
    """Every host's :class:`BootstrapRecord`, kept in ``path``."""

    def __init__(self, document: Document, records: dict[str, BootstrapRecord]) -> None:
        self.document = document
        self._records = records

    @classmethod
    def load(cls, state_dir: Path, documents: Documents | None = None) -> BootstrapTracker:
        """The records kept under ``state_dir`` (or in ``documents``; none when absent)."""
        document = Document(documents if documents is not None else LocalDocuments(Path(state_dir)), BOOTSTRAP_FILE)
        return cls(document, _read(document))

    def get(self, key: str, provider: str, template: str, host_name: str) -> BootstrapRecord:
        """The record of ``key`` (a fresh one when the host was never seen)."""
        return self._records.get(key) or BootstrapRecord(key, provider, template, host_name)

    def records(self) -> list[BootstrapRecord]:
        """Every record, by key."""
        return [self._records[k] for k in sorted(self._records)]

    def record(
        self,
        record: BootstrapRecord,
        outcome: str,
        now: float,
        *,
        attempts: int,
        backoff: Backoff,
        rng: random.Random,
    ) -> Attempt:
        """Record one outcome (``"ok"`` or a failure's text); ``attempts`` is ``policy.retry.attempts``."""
        tried = record.attempts + 1
        if outcome == OK:
            return Attempt(
                self._save([replace(record, attempts=tried, outcome=OK, last_at=now, next_at=0.0)])[0], "done"
            )
        line = (outcome.strip().splitlines() or ["failed"])[0][:500]
        if tried >= attempts:
            new = replace(record, attempts=tried, outcome=line, last_at=now, next_at=0.0, gave_up=True)
            return Attempt(self._save([new])[0], "give-up")
        new = replace(record, attempts=tried, outcome=line, last_at=now, next_at=now + backoff.delay(tried, rng))
        return Attempt(self._save([new])[0], "retry")

    def stopped(self, records: Iterable[BootstrapRecord], outcome: str, now: float) -> list[BootstrapRecord]:
        """The play was stopped before these hosts finished: not bootstrapped, due again at once.

        No attempt is counted: a stop is the daemon's doing, not the host's, and attempts lead to
        returns and to the template's breaker.
        """
        line = (outcome.strip().splitlines() or ["stopped"])[0][:500]
        changed = [replace(r, outcome=line, last_at=now, next_at=0.0) for r in records]
        return self._save(changed) if changed else []

    def first_boot_seen(self, records: Iterable[BootstrapRecord]) -> list[BootstrapRecord]:
        """First-boot outcomes that changed (``first_boot``, ``first_boot_line``): one write for all."""
        changed = list(records)
        return self._save(changed) if changed else []

    def joined(self, records: Iterable[BootstrapRecord]) -> list[BootstrapRecord]:
        """The hosts' workers joined (recorded once each; the breaker counts each once)."""
        changed = [replace(r, joined=True) for r in records]
        return self._save(changed) if changed else []

    def prune(self, live: Iterable[str], providers: Collection[str] | None = None) -> list[str]:
        """Forget the records of every key not in ``live`` (gone hosts); the keys dropped.

        ``providers``: only records of these providers are judged (the ones this process reads
        facts of); another orchestrator's records, kept in the same shared document, stay.
        """
        keep = set(live)

        def gone(records: dict[str, BootstrapRecord]) -> list[str]:
            return sorted(
                k for k, r in records.items() if k not in keep and (providers is None or r.provider in providers)
            )

        records = _read(self.document)
        dropped = gone(records)
        if not dropped:  # every pass: a plain read when nothing is to go (no update, no lock)
            self._records = records
            return dropped

        def drop(now: dict[str, BootstrapRecord]) -> dict[str, BootstrapRecord] | None:
            dropped[:] = gone(now)
            return {k: r for k, r in now.items() if k not in dropped} if dropped else None

        self._records = update_entries(self.document, _ENTRIES, drop)
        return dropped

    def _save(self, changed: list[BootstrapRecord]) -> list[BootstrapRecord]:
        # Over the document as it is at the write, in turn with every other writer: records
        # another orchestrator wrote (its own providers' hosts, in the shared store) are kept.
        self._records = update_entries(self.document, _ENTRIES, lambda now: {**now, **{r.key: r for r in changed}})
        return changed  # memory follows the document only once it holds the change


def _to_json(record: BootstrapRecord) -> dict[str, Any]:
    doc = asdict(record)
    del doc["key"]
    return doc


def _read(document: Document) -> dict[str, BootstrapRecord]:
    return _ENTRIES.entries(document, document.read())


def _from_json(key: str, r: Any) -> BootstrapRecord:
    return BootstrapRecord(
        key=key,
        provider=str(r["provider"]),
        template=str(r["template"]),
        host_name=str(r["host_name"]),
        attempts=int(r["attempts"]),
        outcome=str(r["outcome"]),
        last_at=float(r["last_at"]),
        next_at=float(r["next_at"]),
        gave_up=bool(r["gave_up"]),
        joined=bool(r["joined"]),
        # Records written before first-boot hosts existed have neither.
        first_boot=str(r.get("first_boot", "")),
        first_boot_line=str(r.get("first_boot_line", "")),
    )


_ENTRIES: Final = EntryFormat(
    _FORMAT,
    "hosts",
    _from_json,
    _to_json,
    "bootstrap record file",
    "removing it makes the daemon bootstrap every host not yet joined again",
)
