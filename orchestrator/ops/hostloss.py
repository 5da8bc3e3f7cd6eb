"""Host loss: which managed instances the cloud took away, decided from the cloud views.

Before each apply the executor has the provider's :class:`~orchestrator.workspace.cloudview.Drift`
(from a create's own plan, or from a refresh-only plan; and, where the module can list and
something was deleted, its :class:`~orchestrator.workspace.cloudview.Listing`) and asks
:meth:`LossTracker.observe` which instances are lost (``orchestrator.ops.losses`` says which
reads are made when). The rules:

* the listing shows the instance terminated with reason ``spot-reclaim`` (the cloud took it
  back) or ``expired`` (the cloud's lifetime backstop ended it): lost **at once**, the cloud
  said so;
* otherwise an instance the drift shows deleted is a *suspect*; missing on **two consecutive**
  observations (one observation = one call) it is lost. One read is not enough: a refresh can
  race an eventually consistent API, and a loss removes the host for good;
* a suspect seen again (no longer deleted in the drift, or listed live) is forgiven.

A lost instance is reported by every observation while the drift still shows it deleted (the
executor removes it from the desired set; the next apply drops it from the state), so a crash
between ``observe`` and the ``lost`` fact loses nothing: the next pass reports it again. The
suspects live in ``lost-suspects.json`` in the working directory (:data:`SUSPECTS_FILE`; with
``terraform.backend: pg`` the shard's row of the shared store, ``workspace.documents``),
replaced atomically and durably, so a restart between two observations neither forgets a
suspect nor counts one observation twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.workspace.cloudview import CloudObject, Drift, Listing
from orchestrator.workspace.documents import SUSPECTS, Document, json_body, local_document

SUSPECTS_FILE: Final = SUSPECTS

# Reasons with which the cloud itself says it ended an instance (a loss needs no second read).
CLOUD_REASONS: Final = frozenset({"spot-reclaim", "expired"})
# The reason of a loss decided by repeated absence.
MISSING: Final = "missing"
# Consecutive observations of absence that make a loss.
OBSERVATIONS_FOR_LOSS: Final = 2

_FORMAT: Final = 1
_MAX_SUSPECTS: Final = 100_000
_LIVE_STATES: Final = frozenset({"pending", "running", "stopping", "stopped", "shutting-down", "active"})


@dataclass(frozen=True)
class LostInstance:
    """One instance the cloud took away; ``evidence`` is JSON-ready (it becomes the fact's detail)."""

    instance_key: str
    instance_id: str
    reason: str
    evidence: dict[str, Any] = field(hash=False)


class LossTracker:
    """Suspects of one working directory (shard), persisted in a document between observations."""

    def __init__(self, where: Path | Document) -> None:
        """Track the suspects kept in ``where``: the file ``<workdir>/lost-suspects.json`` (the
        local layout) or the shard's document (``ProviderWorkdir.suspects``); absent = none."""
        self.document = where if isinstance(where, Document) else local_document(Path(where))
        self.path = Path(str(self.document))  # how messages and tests name it

    def suspects(self) -> dict[str, dict[str, Any]]:
        """Instance key → ``{"instance_id", "missing", "first_missing"}`` as persisted."""
        raw = self.document.read()
        if raw is None:
            return {}
        try:
            doc = durable.parse_json(raw)
        except ValueError as exc:
            raise FinalError(f"{self.document}: not JSON ({exc}); remove it to start counting afresh") from None
        return _checked(doc, self.document)

    def observe(self, drift: Drift, listing: Listing | None) -> list[LostInstance]:
        """One observation: the instances lost by the rules above, in instance-key order.

        ``listing`` is None (or unsupported) when the cloud could not be listed: then only the
        two-observation rule can declare a loss.
        """
        before = self.suspects()
        listed = listing.by_id() if listing is not None and listing.supported else {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        after: dict[str, dict[str, Any]] = {}
        lost: list[LostInstance] = []
        for key in sorted(drift.deleted):
            instance_id = drift.deleted[key]
            seen = listed.get(instance_id)
            if seen is not None and seen.state in _LIVE_STATES:
                # The cloud lists it alive: the refresh raced the API, not a loss. Forgiven.
                continue
            previous = before.get(key)
            if previous is None or previous["instance_id"] != instance_id:
                previous = {"instance_id": instance_id, "missing": 0, "first_missing": now}
            entry = {**previous, "missing": min(previous["missing"] + 1, OBSERVATIONS_FOR_LOSS)}
            after[key] = entry
            if seen is not None and seen.state_reason in CLOUD_REASONS:
                lost.append(_lost(key, instance_id, seen.state_reason, entry, seen))
            elif entry["missing"] >= OBSERVATIONS_FOR_LOSS:
                lost.append(_lost(key, instance_id, MISSING, entry, seen))
        if after != before:
            self.save(after)
        return lost

    def save(self, suspects: dict[str, dict[str, Any]]) -> None:
        """Replace the persisted suspects (atomically and durably)."""
        self.document.write(json_body({"format": _FORMAT, "suspects": suspects}))


class PreviewTracker(LossTracker):
    """The persisted suspects as the starting point, every observation kept in memory only.

    What a preview (``xceprov plan``) or the stale check of ``xceprov apply`` uses to predict
    the losses the executor will judge: the same rules, but the file is never written, so a
    preview never counts as one of the two observations that make a loss.
    """

    def __init__(self, where: Path | Document) -> None:
        """Start from the suspects kept in ``where``; nothing is written there."""
        super().__init__(where)
        self._held: dict[str, dict[str, Any]] | None = None

    def suspects(self) -> dict[str, dict[str, Any]]:
        """The persisted suspects, then those of this tracker's own observations."""
        if self._held is None:
            self._held = super().suspects()
        return dict(self._held)

    def save(self, suspects: dict[str, dict[str, Any]]) -> None:
        """Kept in memory: a preview changes nothing on disk."""
        self._held = dict(suspects)


def _lost(key: str, instance_id: str, reason: str, entry: dict[str, Any], seen: CloudObject | None) -> LostInstance:
    evidence: dict[str, Any] = {
        "instance_key": key,
        "instance_id": instance_id,
        "reason": reason,
        "drift": "deleted",
        "observations_missing": entry["missing"],
        "first_missing": entry["first_missing"],
    }
    if seen is not None:
        evidence["listing"] = {"state": seen.state, "state_reason": seen.state_reason, "name": seen.name}
        if seen.terminated_at:  # the cloud's own end of it: where the cost ledger ends it
            evidence["listing"]["terminated_at"] = seen.terminated_at
    else:
        evidence["listing"] = None
    return LostInstance(key, instance_id, reason, evidence)


def _checked(doc: object, path: Document) -> dict[str, dict[str, Any]]:
    """The suspects of a parsed file, each entry's types checked (the file may be damaged)."""
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("suspects"), dict):
        raise FinalError(f"{path}: not a suspects file of format {_FORMAT}; remove it to start counting afresh")
    suspects = doc["suspects"]
    if len(suspects) > _MAX_SUSPECTS:
        raise FinalError(f"{path}: {len(suspects)} suspects, more than {_MAX_SUSPECTS}")
    out: dict[str, dict[str, Any]] = {}
    for key, entry in suspects.items():
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("instance_id"), str)
            and isinstance(entry.get("missing"), int)
            and not isinstance(entry.get("missing"), bool)
            and entry["missing"] >= 1
            and isinstance(entry.get("first_missing"), str)
        )
        if not ok:
            raise FinalError(f"{path}: suspect {key!r}: needs instance_id, missing (1 or more), first_missing")
        out[key] = {k: entry[k] for k in ("instance_id", "missing", "first_missing")}
    return out
