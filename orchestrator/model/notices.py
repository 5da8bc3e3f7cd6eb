"""Interruption notices: the cloud says it will reclaim an instance (a spot reclaim) at a time.

A notice comes from the cloud's API or feed (``ProviderModule.notices``), so it is untrusted
input: :func:`checked` takes one raw notice (a mapping as a reader returns it) and gives an
:class:`InterruptionNotice` or the reason it was refused, never raising on its content:

* the instance id must be a short identifier (letters, digits, ``-_.:``, at most
  :data:`MAX_ID` characters): it is looked up, logged and sent to the controller;
* the kind and detail are kept printable and short (control characters escaped, cut);
* times must be numbers (Unix seconds) or RFC 3339 texts; a reclaim time already past is taken
  as now (the reclaim is due: act at once), one further than :data:`MAX_LEAD` ahead is clamped
  to that (no cloud warns days ahead: such a time is a broken feed, and a host must not stay
  closed for ever on its word); a notice time in the future is taken as now. Each clamp is said
  in ``clamped`` (logged by the reader);
* a read gives at most :data:`MAX_NOTICES` notices (the rest are left to the next read).

Pure: no I/O; ``now`` is handed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from orchestrator.model.text import printable

MAX_ID: Final = 128
MAX_KIND: Final = 64
MAX_DETAIL: Final = 512
# No cloud warns further ahead than this (EC2: two minutes; a rebalance recommendation earlier).
MAX_LEAD: Final = 6 * 3600.0
MAX_NOTICES: Final = 1000
DEFAULT_KIND: Final = "spot-interruption"

_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


@dataclass(frozen=True)
class InterruptionNotice:
    """One notice: the cloud reclaims ``instance_id`` of ``provider`` at ``reclaim_at`` (Unix s).

    ``reclaimed``: the cloud says it has reclaimed it already (a reader that keeps notices as
    history reports them so; the loss is then judged by the host-loss path).
    """

    provider: str
    instance_id: str
    kind: str
    noticed_at: float
    reclaim_at: float
    detail: str = ""
    reclaimed: bool = False
    clamped: tuple[str, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (the audit entry's and the status file's fields)."""
        return {
            "provider": self.provider,
            "instance_id": self.instance_id,
            "kind": self.kind,
            "noticed_at": self.noticed_at,
            "reclaim_at": self.reclaim_at,
            "detail": self.detail,
            "reclaimed": self.reclaimed,
        }


def checked(provider: str, raw: object, now: float) -> InterruptionNotice | str:
    """The notice ``raw`` says, or why it is refused (one line)."""
    if not isinstance(raw, Mapping):
        return f"a notice must be a mapping, not {type(raw).__name__}"
    instance_id = raw.get("instance_id")
    if not isinstance(instance_id, str) or len(instance_id) > MAX_ID or not _ID.fullmatch(instance_id):
        return f"bad instance id {printable(str(instance_id))[:MAX_ID]!r}"
    reclaim_at = _time(raw.get("reclaim_at"))
    if reclaim_at is None:
        return f"instance {instance_id}: bad reclaim time {printable(str(raw.get('reclaim_at')))[:64]!r}"
    noticed_at = _time(raw.get("noticed_at"))
    clamped: list[str] = []
    if noticed_at is None or noticed_at > now:
        if noticed_at is not None:
            clamped.append(f"notice time {noticed_at:.0f} is in the future: taken as now")
        noticed_at = now
    if reclaim_at < now:
        reclaim_at = now
        clamped.append("reclaim time already past: taken as now")
    elif reclaim_at > now + MAX_LEAD:
        clamped.append(f"reclaim time {reclaim_at:.0f} more than {MAX_LEAD:.0f}s ahead: clamped")
        reclaim_at = now + MAX_LEAD
    kind = raw.get("kind")
    kind_text = printable(kind)[:MAX_KIND] if isinstance(kind, str) and kind else DEFAULT_KIND
    detail = raw.get("detail")
    detail_text = printable(detail)[:MAX_DETAIL] if isinstance(detail, str) else ""
    reclaimed = raw.get("reclaimed") is True
    return InterruptionNotice(
        provider, instance_id, kind_text, noticed_at, reclaim_at, detail_text, reclaimed, tuple(clamped)
    )


def _time(value: object) -> float | None:
    """Unix seconds from a number or an RFC 3339 text; None for anything else (or not finite)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return None
        seconds = parsed.timestamp()
    else:
        return None
    return seconds if math.isfinite(seconds) and 0 < seconds < 2**40 else None
