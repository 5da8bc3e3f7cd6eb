"""The memory of refusals as metrics: what is held until when, and how many refusals were recorded.

``xceprov_offering_held_until_seconds{provider,placement,scope}``: the wall-clock end of each
hold (unix seconds; ``placement`` empty for a quota, which holds every offering of the
provider); 0 once a hold ended while its record is kept, and the series goes with the record.
``xceprov_refusals_total{provider,placement,scope}``: the refusals this daemon recorded
(counted once, for the pass that recorded them; another orchestrator's are its own to count).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

# A series' labels: (provider, placement, scope).
Labels = tuple[str, str, str]


class RefusalMetrics:
    """The two metrics of the memory of refusals, in the daemon's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        names = ["provider", "placement", "scope"]
        self.held_until = Gauge(
            "xceprov_offering_held_until_seconds",
            "Until when the offering (scope capacity) or every offering of the provider (scope quota,"
            " placement empty) is held after a refusal, unix seconds; 0 when the hold ended",
            names,
            registry=registry,
        )
        self.refused = Counter(
            "xceprov_refusals", "Capacity and quota refusals this daemon recorded", names, registry=registry
        )
        self._shown: set[Labels] = set()
        self._lock = threading.Lock()

    def set_held(self, rows: Iterable[Mapping[str, Any]], now: float) -> None:
        """The status document's ``refusals`` rows at ``now``: a held row reads its ``until``, one
        past its hold 0; the series of a record gone from the document are removed."""
        values: dict[Labels, float] = {}
        for row in rows:
            labels = (str(row.get("provider", "")), str(row.get("placement", "")), str(row.get("scope", "")))
            until = row.get("until")
            held = isinstance(until, int | float) and not isinstance(until, bool) and until > now
            values[labels] = float(until) if held and until is not None else 0.0
        with self._lock:
            for gone in self._shown - set(values):
                self.held_until.remove(*gone)
            for labels, value in values.items():
                self.held_until.labels(*labels).set(value)
            self._shown = set(values)

    def count(self, refused: Iterable[Mapping[str, Any]]) -> None:
        """One refusal per row (``scope``, ``provider``, ``placement``)."""
        for row in refused:
            self.refused.labels(
                str(row.get("provider", "")), str(row.get("placement", "")), str(row.get("scope", ""))
            ).inc()
