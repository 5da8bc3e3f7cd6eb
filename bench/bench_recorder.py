"""Benchmark: what the flight recorder costs the daemon per pass (issue 32).

Run: ``.venv/bin/python bench/bench_recorder.py [--burst 100] [--passes 20] [--json]`` (no root).

The world and the daemon of ``bench_daemon.py`` (``xceprov sim up --only controller``, the real
:class:`~orchestrator.daemon.service.Daemon` in this process, provider ``sim``, template
``cpu``). The recorder's work is all in its hooks, called synchronously by the daemon (a demand
push, a host event, the facts each op commits, after each pass, the notices after each status;
each writes its records before it returns: ``orchestrator/daemon/flightrecorder.py``). The bench
wraps each hook of the daemon's own recorder and sums the CPU time of the thread that runs it
(``time.thread_time``), and sums the process CPU time of every whole pass (``run_pass``, the
status file included, as ``bench_daemon.py`` counts it). Two phases:

- ``burst``: demand for ``--burst`` hosts, until the cloud holds them and a pass after that
  ended: every intent, created and expected fact is recorded, the demand changes, decisions
  change;
- ``steady``: ``--passes`` passes with nothing to do over those hosts (what the daemon does
  most of the time): the recorder compares and writes nothing.

Printed per phase: the passes, the recorder's CPU per pass, the whole pass's CPU per pass, and
the ratio of a pass with the recorder to one without it, ``pass / (pass - recorder)`` (the
recorder's hooks outside passes, demand pushes and host events, counted in as well). Measured
directly rather than by running the daemon twice, on and off: on a shared machine the
difference of two medians of a few milliseconds is noise; the hooks' own time is not.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sim_world_helpers import sim_world, wait_until  # type: ignore[import-not-found]

from bench.bench_daemon import BenchDaemon, Cloud, Marks, configure, daemon_in, load, quiet, submit

HOOKS = ("demand", "host_event", "facts", "after_pass", "notices")


class HookClock:
    """The thread CPU time spent in the recorder's hooks, per hook."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = dict.fromkeys(HOOKS, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(HOOKS, 0)

    def wrap(self, name: str, method: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(method)
        def timed(*args: Any) -> None:
            began = time.thread_time()
            try:
                method(*args)
            finally:
                spent = time.thread_time() - began
                with self.lock:
                    self.seconds[name] += spent
                    self.calls[name] += 1

        return timed

    def total(self) -> float:
        with self.lock:
            return sum(self.seconds.values())


def instrument(daemon: BenchDaemon) -> HookClock:
    """Wrap the daemon's recorder's hooks (the guard's fact observer was bound at start: again)."""
    clock = HookClock()
    recorder = daemon.recorder
    for name in HOOKS:
        setattr(recorder, name, clock.wrap(name, getattr(recorder, name)))
    daemon.guard.observer = recorder.facts
    return clock


def phase(name: str, daemon: BenchDaemon, clock: HookClock, body: Callable[[], None]) -> dict[str, Any]:
    """Run ``body``; the passes it took, their CPU and the recorder's."""
    passes, recorded = len(daemon.whole), clock.total()
    body()
    whole = daemon.whole[passes:]
    spent = clock.total() - recorded
    count = max(1, len(whole))
    pass_ms = 1000 * sum(whole) / count
    recorder_ms = 1000 * spent / count
    row = {
        "passes": len(whole),
        "pass_cpu_ms": round(pass_ms, 3),
        "recorder_cpu_ms": round(recorder_ms, 4),
        "ratio_with_to_without": round(pass_ms / (pass_ms - recorder_ms), 4) if pass_ms > recorder_ms else None,
    }
    print(
        f"{name}: {row['passes']} passes, pass CPU {row['pass_cpu_ms']} ms, recorder {row['recorder_cpu_ms']} ms"
        f" per pass: with/without {row['ratio_with_to_without']}  load {load()}",
        flush=True,
    )
    return row


def run(burst: int, passes: int) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-recorder-"))
        world = stack.enter_context(sim_world(Path(tmp) / "site", f"brc-{secrets.token_hex(3)}"))
        configure(world, 30.0)
        marks = Marks()
        cloud = Cloud(world)
        stack.callback(cloud.conn.close)
        daemon, _ = stack.enter_context(daemon_in(world, marks))
        clock = instrument(daemon)

        def burst_body() -> None:
            before = cloud.count()
            submit(world, burst)
            quiet(daemon, marks, cloud, before + burst, 1800)

        def steady_body() -> None:
            for _ in range(passes):
                ended = marks.count("pass end")
                daemon.wake_pass()
                wait_until("the woken pass", lambda ended=ended: marks.count("pass end") > ended, timeout=120)
                time.sleep(0.3)

        results = {
            "burst": {"hosts": burst, **phase("burst", daemon, clock, burst_body)},
            "steady": {"live": cloud.count(), **phase("steady", daemon, clock, steady_body)},
            "hooks_ms": {k: round(1000 * v, 3) for k, v in clock.seconds.items()},
            "hook_calls": dict(clock.calls),
        }
        recordings = sorted((world.site / "state").rglob("*.jsonl*")) if (world.site / "state").is_dir() else []
        results["recording_files"] = len(recordings)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.burst, args.passes)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
