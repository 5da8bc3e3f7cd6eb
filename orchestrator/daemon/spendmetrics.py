"""What bursting costs, as metrics (docs/cost.md, docs/daemon.md "Metrics").

``xceprov_spend_total{provider,template}``: money spent since this daemon started, by the cost
ledger (``reconcile/costs.py``: each instance per second from the cloud's launch time, at its
offering's price), a counter: it only grows while the daemon runs and starts again from 0 with
it, so ``increase(xceprov_spend_total[1d])`` is the day's spend across restarts, as Prometheus
users read any counter. It is raised to the status document's ``spend.total`` at each write
(never lowered: a price lowered in a reload does not take back money counted).
``xceprov_spend_rate_per_hour{provider,template}``: money per hour of the instances live now
(launched, not returned or lost; a warm-pool instance at its stopped price).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge


class SpendMetrics:
    """The two spend metrics, in the daemon's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        names = ["provider", "template"]
        self.spent = Counter(
            "xceprov_spend", "Money spent since the daemon started, by the cost ledger", names, registry=registry
        )
        self.rate = Gauge(
            "xceprov_spend_rate_per_hour", "Money per hour of the instances live now", names, registry=registry
        )
        self._counted: dict[tuple[str, str], float] = {}
        self._rated: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def update(self, spend: Mapping[str, Any] | None) -> None:
        """From the status document's ``spend`` member (nothing without one)."""
        if not spend:
            return
        totals = _pairs(spend.get("total"))
        rates = _pairs(spend.get("rate_per_hour"))
        with self._lock:
            for pair, value in totals.items():
                more = value - self._counted.get(pair, 0.0)
                if more > 0:
                    self.spent.labels(*pair).inc(more)
                    self._counted[pair] = value
            for pair in self._rated - set(rates):
                self.rate.labels(*pair).set(0)
            for pair, value in rates.items():
                self.rate.labels(*pair).set(value)
            self._rated |= set(rates)


def _pairs(nested: object) -> dict[tuple[str, str], float]:
    if not isinstance(nested, Mapping):
        return {}
    out: dict[tuple[str, str], float] = {}
    for provider, row in nested.items():
        if isinstance(row, Mapping):
            for template, value in row.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    out[(str(provider), str(template))] = float(value)
    return out
