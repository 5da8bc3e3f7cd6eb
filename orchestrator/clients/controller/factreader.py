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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import Fact

FULL_EVERY: Final = 600.0


@dataclass
class _Copy:
    """What this reader holds of one provider's facts, and from which controller."""

    source: tuple[str, int]  # (controller id, term)
    read_at: float  # monotonic seconds of the last full read
    facts: list[Fact] = field(default_factory=list)

    @property
    def last_id(self) -> int:
        return self.facts[-1].fact_id if self.facts else 0


class FactReader:
    """Every fact of a provider, oldest first, asking the controller only for the new ones."""

    def __init__(
        self, link: ControllerLink, *, full_every: float = FULL_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.link = link
        self.full_every = full_every
        self.clock = clock
        self._copies: dict[str, _Copy] = {}
        self._lock = threading.Lock()  # the pass and the status writer may read from two threads
        self.full_reads = 0  # how many full reads were made (the rest were incremental)

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider`` by fact id; ``ControllerError`` when the controller cannot answer."""
        state = self.link.state()
        source = (state.controller_id, state.term)
        now = self.clock()
        with self._lock:
            copy = self._copies.get(provider)
            if copy is not None and copy.source == source and now - copy.read_at < self.full_every:
                new = sorted(self.link.query_facts(provider, after=copy.last_id), key=lambda f: f.fact_id)
                if not new or new[0].fact_id > copy.last_id:
                    copy.facts.extend(new)
                    return list(copy.facts)
            every = sorted(self.link.query_facts(provider), key=lambda f: f.fact_id)
            self.full_reads += 1
            self._copies[provider] = _Copy(source, now, every)
            return list(every)
