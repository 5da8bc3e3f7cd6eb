"""Which hosts each provider's bootstrap play runs on right now, for the status file.

The pass runs the bootstrap play in batches (``reconcile.hostphases``), each for minutes on a
large burst, and the status file is otherwise written only between passes. :class:`Bootstrapping`
wraps the daemon's play: it records the batch's keys while the play runs and calls ``changed``
when a batch starts, so that ``xceprov status`` shows the hosts running and, from the records
of the batches before, those done and failed while the burst goes on; ``played`` hears how long
each batch took and what became of each host (``xceprov_bootstrap_duration_seconds``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from orchestrator.ops.executor import Bootstrap, Created


class Bootstrapping:
    """The instance keys in a bootstrap play now, per provider (set by the pass, read by the status)."""

    def __init__(self, played: Callable[[str, Iterable[str], float], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._played = played
        self._running: dict[str, frozenset[str]] = {}

    def running(self) -> dict[str, frozenset[str]]:
        """A copy: provider -> the keys its play runs on."""
        with self._lock:
            return dict(self._running)

    def around(self, play: Bootstrap, changed: Callable[[], None]) -> Bootstrap:
        """``play`` that records its hosts while it runs and calls ``changed`` once they are recorded."""

        def run(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
            with self._lock:
                self._running[provider] = frozenset(c.key for c in created)
            began = time.monotonic()
            outcomes: Iterable[str] = ["failed: the play raised"] * len(created)
            try:
                changed()
                result = play(provider, created)
                outcomes = list(result.values())
                return result
            finally:
                if self._played is not None:
                    self._played(provider, outcomes, time.monotonic() - began)
                with self._lock:
                    self._running.pop(provider, None)

        return run
