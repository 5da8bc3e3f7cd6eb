"""A provider's facts read from the controller incrementally: only what was committed since.

A reconcile pass and the status file after it each need every fact of every provider. Reading
them all each time (``queryFacts`` from id 0, every page) was most of a no-op pass over 1000
hosts (184 ms of its 340 ms of CPU for 2002 facts, ``bench/bench_daemon.py``), and it grows with
the fact log while the news of one pass is a handful of facts. The protocol's own resync rule
(docs/protocol.md §8) is to ask ``queryFacts`` from the last ``factId`` seen: facts are
append-only and listed in ``factId`` order, so that read returns exactly what is new, whoever
committed it (another holder, a command run elsewhere).

A full read is still made when an incremental one could be wrong or is merely old:

* the first read of a provider;
* a new term or another controller (``LinkState.term``/``controller_id``): a restarted or
  failed-over controller is not trusted to have kept the ids this reader saw;
* an answer that breaks the order (a fact at or below the last id seen: a controller that does
  not honour ``afterFactId``);
* every ``full_every`` seconds (default 10 minutes), a backstop against anything else.

A read the controller made fail by breaking the paging rules (``ControllerMisbehaved``: a page
that does not advance, too many pages or facts, docs/protocol.md "Limits") is logged in one
line and retried with backoff: until the backoff's delay has passed, asking for that provider's
facts fails at once with the same reason, without asking the controller again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import Fact
from orchestrator.errors import ControllerMisbehaved
from orchestrator.model.backoff import Backoff

log = logging.getLogger(__name__)

FULL_EVERY: Final = 600.0
# Backoff after a read the controller made fail: from 1 s up to 5 minutes (jittered).
RETRY_FIRST: Final = 1.0
RETRY_MAX: Final = 300.0


@dataclass
class _Copy:
    """What this reader holds of one provider's facts, and from which controller."""

    source: tuple[str, int]  # (controller id, term)
    read_at: float  # monotonic seconds of the last full read
    facts: list[Fact] = field(default_factory=list)
    # The last fact id the controller sent, skipped facts of an unknown kind included.
    last_id: int = 0


@dataclass
class _Refused:
    """A provider whose last read the controller made fail, and when to ask again."""

    backoff: Backoff
    reason: str = ""
    retry_at: float = 0.0


class FactReader:
    """Every fact of a provider, oldest first, asking the controller only for the new ones."""

    def __init__(
        self, link: ControllerLink, *, full_every: float = FULL_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.link = link
        self.full_every = full_every
        self.clock = clock
        self._copies: dict[str, _Copy] = {}
        self._refused: dict[str, _Refused] = {}
        self._lock = threading.Lock()  # the pass and the status writer may read from two threads
        self.full_reads = 0  # how many full reads were made (the rest were incremental)

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider`` by fact id; ``ControllerError`` when the controller cannot
        answer, ``ControllerMisbehaved`` when it broke the paging rules (then until the backoff
        passes without asking)."""
        state = self.link.state()
        source = (state.controller_id, state.term)
        now = self.clock()
        with self._lock:
            refused = self._refused.get(provider)
            if refused is not None and now < refused.retry_at:
                raise ControllerMisbehaved(f"{refused.reason}; next try in {refused.retry_at - now:.0f}s")
            try:
                facts = self._read(provider, source, now)
            except ControllerMisbehaved as exc:
                refused = self._refused.setdefault(provider, _Refused(Backoff(RETRY_FIRST, RETRY_MAX)))
                refused.reason = str(exc)
                refused.retry_at = now + refused.backoff.next_delay()
                log.warning("%s; retrying in %.0fs", exc, refused.retry_at - now)
                raise
            self._refused.pop(provider, None)
            return facts

    def _read(self, provider: str, source: tuple[str, int], now: float) -> list[Fact]:
        copy = self._copies.get(provider)
        if copy is not None and copy.source == source and now - copy.read_at < self.full_every:
            page = self.link.read_facts(provider, after=copy.last_id)
            if not page.first_id or page.first_id > copy.last_id:
                copy.facts.extend(sorted(page.facts, key=lambda f: f.fact_id))
                copy.last_id = max(copy.last_id, page.last_id)
                return list(copy.facts)
        page = self.link.read_facts(provider)
        every = sorted(page.facts, key=lambda f: f.fact_id)
        self.full_reads += 1
        self._copies[provider] = _Copy(source, now, every, max(page.last_id, every[-1].fact_id if every else 0))
        return list(every)
