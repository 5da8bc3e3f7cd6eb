"""Enum values from a newer controller that this version skipped: one warning each, all counted.

A controller of a later version may send a fact kind, host state or event kind this version has
no name for. Dropping the connection for it would resync into the same message forever, so the
value is skipped where it is converted (``messages``) and reported here: the first time a value
is met the log says which field, which value and how many were skipped in that message; every
occurrence is counted (``total``, by field in ``counts``) and handed to the listeners (the
daemon's ``xceprov_controller_unknown_values_total``). docs/protocol.md, "Values this version does
not know".
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Final

from orchestrator.protocol.decode import Sighting

log = logging.getLogger(__name__)

# Distinct (field, value) pairs remembered as already warned about: a hostile controller can
# send many ordinals (up to 65,536 per field); past this many, new ones are counted, not logged.
MAX_WARNED: Final = 1024

Listener = Callable[[str, int], None]  # (Struct.field, values skipped in one message)


class UnknownValues:
    """The count of skipped values of one link, and who wants to hear of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: set[Sighting] = set()
        self.counts: dict[str, int] = {}
        self._listeners: list[Listener] = []

    @property
    def total(self) -> int:
        """Every unknown value skipped since the link was made."""
        with self._lock:
            return sum(self.counts.values())

    def listen(self, listener: Listener) -> None:
        """Call ``listener(field, n)`` for every message in which ``n`` values of ``field`` were skipped."""
        self._listeners.append(listener)

    def skipped(self, member: str, address: str, sightings: Sequence[Sighting]) -> None:
        """``sightings`` were skipped in one ``member`` message from the controller at ``address``."""
        if not sightings:
            return
        per_value = collections.Counter(sightings)
        per_field: collections.Counter[str] = collections.Counter(field for field, _ in sightings)
        with self._lock:
            for field, n in per_field.items():
                self.counts[field] = self.counts.get(field, 0) + n
            total = sum(self.counts.values())
            new = [s for s in per_value if s not in self._warned]
            room = max(0, MAX_WARNED - len(self._warned))
            self._warned.update(new[:room])
        for field, value in new[:room]:
            log.warning(
                "controller %s sent %s value %d in a %s message, unknown to this version: skipped "
                "(%d such values in that message, %d unknown values skipped so far)",
                address,
                field,
                value,
                member,
                per_value[(field, value)],
                total,
            )
        if not new[:room]:
            log.debug("controller %s: %d unknown values skipped in a %s message", address, len(sightings), member)
        for field, n in per_field.items():
            for listener in self._listeners:
                try:
                    listener(field, n)
                except Exception:  # a listener's bug must not drop the link's I/O thread
                    log.exception("listener of unknown values %r failed", listener)
