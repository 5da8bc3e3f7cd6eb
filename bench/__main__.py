"""``make bench`` / ``python -m bench``: run every benchmark, each printing its ratios.

Benchmarks compare the toolkit with the raw tool doing the same work in the same run, so the
ratios mean something on any machine; seconds do not. Results are recorded in
docs/performance.md. Benchmarks that need root (simulated hosts) are skipped without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    ("bench_plan.py", False),
    ("bench_sim_apply.py", False),
    ("bench_shards.py", False),
    ("bench_executor.py", False),
    ("bench_orphans.py", False),
    ("bench_lease.py", False),
    ("bench_daemon.py", False),
    ("bench_scaleout.py", False),
    ("bench_capacity.py", False),
    ("bench_cost.py", False),
    ("bench_recorder.py", False),
    ("bench_replay.py", False),
    ("bench_bootstrap.py", True),
    ("bench_firstboot.py", True),
    ("bench_spot.py", True),
    ("bench_fidelity.py", True),
]


def main() -> int:
    """Run each benchmark in turn; the exit code is the number that failed."""
    failed = 0
    for name, needs_root in BENCHES:
        if needs_root and os.geteuid() != 0:
            print(f"bench: {name}: skipped (needs root for simulated hosts)")
            continue
        print(f"bench: {name}", flush=True)
        done = subprocess.run([sys.executable, str(HERE / name)], check=False)
        failed += done.returncode != 0
    return failed


if __name__ == "__main__":
    sys.exit(main())
