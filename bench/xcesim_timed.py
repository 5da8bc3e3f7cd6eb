"""The ``xcesim`` provider with a stopwatch on every store call, for ``bench_sim_apply.py``.

The benchmark installs this module in its own provider mirror under the ``xcesim`` name
(``TIMED_XCESIM``), so Terraform starts it instead of the plain provider. It counts calls and
seconds per operation and, at exit, appends one JSON line to the file named by
``XCESIM_BENCH_STATS``: ``{"pid": ..., "calls": {"create": {"n": 3, "seconds": 0.02}, ...}}``.
The simulated cloud itself knows nothing of the benchmark.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from tf.runner import run_provider

from orchestrator.clients.terraform.mirror import XCESIM, LocalProvider
from orchestrator.sim.cloud.provider import XceSimProvider

STATS_ENV: Final = "XCESIM_BENCH_STATS"
# Same source address and version as the plain provider, so the benchmark's Terraform code
# does not change; only the mirror the benchmark writes points at this module. Terraform's
# launcher runs it with the checkout on PYTHONPATH (``CHECKOUT``).
TIMED_XCESIM: Final = LocalProvider(XCESIM.namespace, XCESIM.type, XCESIM.version, "bench.xcesim_timed")
CHECKOUT: Final = Path(__file__).resolve().parents[1]


class TimedProvider(XceSimProvider):
    """``XceSimProvider`` that keeps, per operation, [calls, seconds inside the store]."""

    def __init__(self) -> None:
        super().__init__()
        self.stats: dict[str, list[float]] = {}
        self._stats_lock = threading.Lock()

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """The plain provider's call (retries included), timed."""
        started = time.perf_counter()
        try:
            return super().call(what, fn, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            with self._stats_lock:
                entry = self.stats.setdefault(what, [0, 0.0])
                entry[0] += 1
                entry[1] += elapsed

    def write_stats(self, path: str) -> None:
        """Append this process's call counts and seconds as one JSON line (nothing if no calls)."""
        with self._stats_lock:
            calls = {k: {"n": int(v[0]), "seconds": v[1]} for k, v in self.stats.items()}
        if not calls:
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "calls": calls}) + "\n")


def main() -> None:
    """Serve the timed provider to Terraform; stats go to ``$XCESIM_BENCH_STATS`` at exit."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    provider = TimedProvider()
    stats = os.environ.get(STATS_ENV)
    if stats:
        atexit.register(provider.write_stats, stats)
    run_provider(provider, sys.argv)


if __name__ == "__main__":
    main()
