"""The memory of refusals: which offerings the cloud had no room for, and which providers' quota
is reached, and until when nothing is asked of them (docs/daemon.md, "The memory of refusals").

A **capacity** refusal holds one offering of one provider, keyed by its *placement*
(``offering_name(flavor, zone, subnet)``, whatever the offering is called: two templates that
name the same flavor in the same zone share the cloud's room, so one refusal holds both). It is
probed again after ``policy.capacity_backoff``: ``base``, doubled per refusal in a row up to
``max``, jittered down by at most half (:mod:`orchestrator.model.backoff`, the loop's random
source). A **quota** refusal holds every offering of the provider (the quota is the account's),
by ``policy.quota_backoff`` (longer), and is cleared early once one of the provider's instances
is returned or lost (:meth:`RefusalMemory.quota_may_have_changed`: the quota can have room again).
A create that goes through clears the capacity records of its placements.

The records live in the cluster's document ``refusals.json`` (a 0600 file under the state
directory, or the shared store's row with ``terraform.backend: pg``), so a restarted daemon keeps
them and every orchestrator of the cluster sees the others'. Each change is applied to the
records as the document holds them at that moment, in turn with every other writer
(``Document.update``): no orchestrator's record is lost to another's older copy. Reads answer
from the records as last read (:meth:`RefusalMemory.refresh`, once per pass) or written.

A record is removed once it is past its ``until`` by more than its scope's ``max``: the document
stays small, and a refusal long ago starts the backoff from ``base`` again. The document is read
as untrusted input (edited by hand, written by another version): a malformed record is dropped
with one log line, a document that does not parse reads as empty; neither stops the daemon.
Times are wall-clock seconds (the caller's clock): they must mean the same after a reboot.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from orchestrator import durable
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import HoldSettings, PolicySettings
from orchestrator.model.offerings import valid_name
from orchestrator.workspace.documents import Document, Documents, SnapshotDocuments, json_body

log = logging.getLogger(__name__)

REFUSALS_FILE: Final = "refusals.json"
_FORMAT: Final = 1
CAPACITY: Final = "capacity"
QUOTA: Final = "quota"
Scope = Literal["capacity", "quota"]
SCOPES: Final = (CAPACITY, QUOTA)
# The cloud's text kept with a record: one line, this long at most (the document stays small).
TEXT_LIMIT: Final = 300

# The most refusals kept for :meth:`RefusalMemory.drain` (a process that never drains stays small).
_RECORDED_LIMIT: Final = 1000
# A record's identity: (scope, provider, placement); placement "" for quota.
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Refusal:
    """One remembered refusal: what it holds, how many in a row, and until when."""

    scope: str  # "capacity" | "quota"
    provider: str
    placement: str  # "" for quota
    failures: int
    first: float  # the first refusal of the row (wall seconds)
    last: float  # the latest
    until: float  # nothing is asked of it before then
    text: str  # the cloud's words, one line

    @property
    def key(self) -> Key:
        """What the record is about."""
        return (self.scope, self.provider, self.placement)

    def held(self, now: float) -> bool:
        """Whether it still holds at ``now``."""
        return now < self.until

    def evidence(self) -> dict[str, Any]:
        """JSON-ready (status, audit)."""
        out = asdict(self)
        for name in ("first", "last", "until"):
            out[name] = round(out[name], 3)
        return out


@dataclass(frozen=True)
class _Rejected:
    """A record of the document that was dropped, and why."""

    index: int
    why: str


class RefusalMemory:
    """Every remembered refusal of the cluster, kept in ``document`` (see the module docstring).

    Several threads of one process use it (the pass and a resume beside it): the records as last
    read are swapped under a lock, never changed in place.
    """

    def __init__(
        self,
        document: Document,
        capacity_backoff: HoldSettings,
        quota_backoff: HoldSettings,
        rng: random.Random | None = None,
    ) -> None:
        self.document = document
        self.settings: dict[str, HoldSettings] = {CAPACITY: capacity_backoff, QUOTA: quota_backoff}
        self.rng = rng or random.Random()
        self._records: dict[Key, Refusal] = {}
        self._seen: bytes | None = None
        self._lock = threading.Lock()
        # The refusals this process recorded since :meth:`drain` (the daemon counts them).
        self._recorded: list[Refusal] = []
        # Contents already warned about: a malformed document is one log line, not one per read.
        self._warned: set[bytes] = set()

    @classmethod
    def load(cls, documents: Documents, policy: PolicySettings, rng: random.Random | None = None) -> RefusalMemory:
        """The memory kept in ``documents`` (``cluster_documents``), read now."""
        memory = cls(Document(documents, REFUSALS_FILE), policy.capacity_backoff, policy.quota_backoff, rng)
        memory.refresh()
        return memory

    def configure(self, policy: PolicySettings) -> None:
        """The backoffs of a reloaded configuration (the records stay)."""
        self.settings = {CAPACITY: policy.capacity_backoff, QUOTA: policy.quota_backoff}

    def refresh(self) -> None:
        """Read the document again (another orchestrator may have written it since)."""
        raw = self.document.read()
        with self._lock:
            if raw != self._seen or raw is None:
                self._records = self._parse(raw)
                self._seen = raw

    def snapshot(self) -> RefusalMemory:
        """The memory as last read or written, answering without the document (a status written
        while the shared store is away shows the records as they were)."""
        with self._lock:
            seen, records = self._seen, dict(self._records)
        copy = RefusalMemory(
            Document(SnapshotDocuments({REFUSALS_FILE: seen}), REFUSALS_FILE),
            self.settings[CAPACITY],
            self.settings[QUOTA],
            self.rng,
        )
        copy._records, copy._seen = records, seen
        return copy

    # -- reads (from the records as last read or written) ----------------------------------------

    def capacity(self, provider: str, placement: str, now: float) -> float | None:
        """Until when the offering ``placement`` of ``provider`` is held for capacity (None: free)."""
        return self._until((CAPACITY, provider, placement), now)

    def quota(self, provider: str, now: float) -> float | None:
        """Until when every offering of ``provider`` is held for its quota (None: free)."""
        return self._until((QUOTA, provider, ""), now)

    def _until(self, key: Key, now: float) -> float | None:
        with self._lock:
            record = self._records.get(key)
        return record.until if record is not None and record.held(now) else None

    def records(self, now: float) -> list[Refusal]:
        """Every record not expired at ``now`` (held or past its hold, still counting its
        refusals in a row), by scope, provider and placement."""
        with self._lock:
            records = list(self._records.values())
        return sorted((r for r in records if not self._expired(r, now)), key=lambda r: r.key)

    def quota_record(self, provider: str) -> Refusal | None:
        """The quota record of ``provider`` (held or not), None when there is none."""
        with self._lock:
            return self._records.get((QUOTA, provider, ""))

    def holds_capacity(self, provider: str) -> bool:
        """Whether a capacity record of ``provider`` is known (held or not)."""
        with self._lock:
            return any(k[0] == CAPACITY and k[1] == provider for k in self._records)

    def drain(self) -> list[Refusal]:
        """The refusals this process recorded since the last call (each counted once)."""
        with self._lock:
            out, self._recorded = self._recorded, []
        return out

    # -- writes (every one over the document as it is now) ---------------------------------------

    def refused(self, provider: str, placement: str, kind: str, text: str, now: float) -> Refusal:
        """The cloud refused ``placement`` of ``provider`` for ``kind`` (``capacity`` or ``quota``;
        a quota record ignores the placement): hold it, one step longer than the last time."""
        if kind not in SCOPES:
            raise ValueError(f"refusal kind {kind!r}: expected one of {', '.join(SCOPES)}")
        key: Key = (kind, provider, "" if kind == QUOTA else placement)
        line = _one_line(text)
        done: list[Refusal] = []

        def step(records: dict[Key, Refusal]) -> dict[Key, Refusal]:
            old = records.get(key)
            if old is not None and self._expired(old, now):
                old = None
            settings = self.settings[kind]
            failures = 1 if old is None else old.failures + 1
            hold = Backoff(settings.base, settings.max).delay(failures, self.rng)
            until = max(now + hold, old.until if old is not None else now)
            first = now if old is None else old.first
            new = Refusal(kind, provider, key[2], failures, first, now, until, line)
            done[:] = [new]
            return {**records, key: new}

        self._change(step, now)
        with self._lock:
            self._recorded = [*self._recorded[-_RECORDED_LIMIT + 1 :], done[0]]
        return done[0]

    def succeeded(self, provider: str, placement: str) -> None:
        """A create on ``placement`` of ``provider`` went through: it has room (its capacity record
        goes; nothing is written when there is none)."""
        self._forget((CAPACITY, provider, placement))

    def quota_may_have_changed(self, provider: str) -> None:
        """One of ``provider``'s instances was returned or lost: its quota record goes (the next
        create finds out whether there is room)."""
        self._forget((QUOTA, provider, ""))

    def prune(self, now: float) -> None:
        """Remove the records expired at ``now`` (nothing is written when none is)."""
        with self._lock:
            stale = any(self._expired(r, now) for r in self._records.values())
        if stale:
            self._change(lambda records: records, now)

    def _forget(self, key: Key) -> None:
        with self._lock:
            known = key in self._records
        if known:  # as last read: another orchestrator's record shows here from the next refresh
            self._change(lambda records: {k: r for k, r in records.items() if k != key}, None)

    def _expired(self, record: Refusal, now: float) -> bool:
        return now > record.until + self.settings[record.scope].max

    def _change(self, step: Callable[[dict[Key, Refusal]], dict[Key, Refusal]], now: float | None) -> None:
        """``step`` applied to the records as the document holds them at the write (expired ones
        dropped first), in turn with every other writer of it."""

        def apply(raw: bytes | None) -> bytes | None:
            before = self._parse(raw)
            records = {k: r for k, r in before.items() if now is None or not self._expired(r, now)}
            after = step(records)
            if raw is not None and after == before:
                return None
            return _body(after.values())

        body = self.document.update(apply)
        records = self._parse(body)
        with self._lock:
            self._records, self._seen = records, body

    # -- the document ----------------------------------------------------------------------------

    def _parse(self, raw: bytes | None) -> dict[Key, Refusal]:
        if raw is None:
            return {}
        records, problem, rejected = _records_of(raw)
        if (problem or rejected) and raw not in self._warned:
            self._warned.add(raw)
            if problem:
                log.warning("%s: not read (%s); the memory of refusals starts empty", self.document, problem)
            for bad in rejected:
                log.warning("%s: refusal record %d dropped (%s)", self.document, bad.index, bad.why)
        return records


def _records_of(raw: bytes) -> tuple[dict[Key, Refusal], str, list[_Rejected]]:
    """The records of a document, a problem with the whole document, and the records dropped."""
    try:
        doc = durable.parse_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return {}, f"not JSON: {exc}", []
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("refusals"), list):
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        return {}, f"format {found!r}, expected {_FORMAT} with a refusals list", []
    out: dict[Key, Refusal] = {}
    rejected: list[_Rejected] = []
    for index, entry in enumerate(doc["refusals"]):
        try:
            record = _record(entry)
        except (ValueError, TypeError, KeyError) as exc:
            rejected.append(_Rejected(index, str(exc) or type(exc).__name__))
            continue
        out[record.key] = record
    return out, "", rejected


def _record(entry: Any) -> Refusal:
    """One record, checked field by field (``ValueError`` names what is wrong)."""
    if not isinstance(entry, dict):
        raise ValueError(f"a record is an object, not {type(entry).__name__}")
    scope, provider, placement = entry["scope"], entry["provider"], entry["placement"]
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r}")
    if not isinstance(provider, str) or not provider:
        raise ValueError(f"provider {provider!r}")
    if scope == QUOTA and placement != "":
        raise ValueError(f"a quota record with placement {placement!r}")
    if scope == CAPACITY and not (isinstance(placement, str) and valid_name(placement)):
        raise ValueError(f"placement {placement!r}")
    failures = entry["failures"]
    if type(failures) is not int or failures < 1:
        raise ValueError(f"failures {failures!r}")
    first, last, until = (_time(entry, name) for name in ("first", "last", "until"))
    text = entry.get("text", "")
    if not isinstance(text, str):
        raise ValueError(f"text {text!r}")
    return Refusal(scope, provider, placement, failures, first, last, until, _one_line(text))


def _time(entry: dict[str, Any], name: str) -> float:
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} {value!r}")
    return float(value)


def _body(records: Iterable[Refusal]) -> bytes:
    rows = [asdict(r) for r in sorted(records, key=lambda r: r.key)]
    return json_body({"format": _FORMAT, "refusals": rows})


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= TEXT_LIMIT else line[: TEXT_LIMIT - 3] + "..."
