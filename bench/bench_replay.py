"""Benchmark: a week of decisions replayed (issue 32, "Replay of a recording of 7 days of
decisions at one pass a minute: ≤ 60 s").

Run: ``.venv/bin/python bench/bench_replay.py [--days 7] [--jobs-per-day 300] [--keep DIR]
[--out FILE] [--check]``.

1. A workload of ``--days`` days is drawn from the shipped trace's model (``scripts/make_trace.py
   --days N``: Poisson arrivals with a daily cycle, log-normal run times).
2. ``xceprov replay TRACE --record WEEK.jsonl.gz`` replays it under the built-in configuration
   with ``daemon.reconcile_interval: 60s`` (one pass a minute, and one at each demand change, as
   the daemon runs) and writes the flight recording the daemon's own recorder makes of it: a
   recording of ``--days`` days of decisions (a daemon cannot be run for a week in a session;
   the recording is what the daemon would have recorded of that week).
3. The timed run: ``xceprov replay WEEK.jsonl.gz --json`` — reading the recording, drawing the
   model world from it, the real pass over every minute of the week, the figures of both runs —
   as a site runs it (a process of its own, start-up included).

Printed: the seconds against the 60 s target, the replay's speed against the real time it
covers (the "raw tool" here is the daemon itself, which takes the week), the milliseconds per
replayed pass, and how far the replay of the recording lands from what the recording says
happened (same configuration: a consistency check of the model, not the fidelity check, which
is ``bench/bench_fidelity.py``'s). ``--check``: exit 1 when the replay took over 60 s. The summary
is written to ``--out`` (default ``bench/results/bench_replay.json``, not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "bench_replay.json"
TARGET_SECONDS = 60.0
XCEPROV = [sys.executable, "-m", "orchestrator.cli"]


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def site(directory: Path) -> Path:
    """The built-in configuration, one pass a minute."""
    text = (ROOT / "orchestrator" / "defaults" / "xceprov.yaml").read_text()
    path = directory / "bench.yaml"
    path.write_text(text + "\ndaemon:\n  reconcile_interval: 60s\n")
    return path


def timed(args: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench_replay: {' '.join(args[2:])} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs-per-day", type=int, default=300)
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: a temporary directory)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="exit 1 when the replay took over 60 s")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        config = site(work)
        trace, recording = work / "week.swf", work / "week.jsonl.gz"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_trace.py"), "--days", str(args.days),
             "--jobs-per-day", str(args.jobs_per_day), "-o", str(trace)],
            check=True, capture_output=True,
        )  # fmt: skip
        print(f"bench_replay: {args.days} days, {args.jobs_per_day} jobs a day; load {load()}")
        made, _ = timed([*XCEPROV, "replay", str(trace), "--config", str(config), "--record", str(recording)], work)
        _, shown = timed([*XCEPROV, "record", "show", str(recording), "--json"], work)
        summary = json.loads(shown)
        seconds, out = timed([*XCEPROV, "replay", str(recording), "--config", str(config), "--json"], work)
        found = json.loads(out)
    period = summary["last"] - summary["first"]
    passes = summary["counts"]["decision"]
    minutes = period / 60.0
    result: dict[str, Any] = {
        "days": args.days,
        "jobs": found["source"]["jobs"],
        "records": summary["records"],
        "decision_records": passes,
        "period_seconds": period,
        "recording_made_seconds": round(made, 2),
        "replay_seconds": round(seconds, 2),
        "speed_vs_real_time": round(period / seconds),
        "ms_per_replayed_minute": round(seconds * 1000.0 / minutes, 3),
        "target_seconds": TARGET_SECONDS,
        "verdict": "PASS" if seconds <= TARGET_SECONDS else "MISS",
        "load": load(),
        "recorded": {k: found["recorded"][k] for k in ("cost", "host_hours", "launches", "returns", "lost")},
        "replayed": {k: found["replayed"][k] for k in ("cost", "host_hours", "launches", "returns", "lost")},
    }
    days = period / 86400
    print(f"  recording: {summary['records']} records over {days:.2f} days, {passes} decision records,")
    print(f"    {result['jobs']} jobs inferred (made by a replay of the trace in {made:.1f} s)")
    verdict, speed = result["verdict"], result["speed_vs_real_time"]
    print(f"  replay of the recording: {seconds:.1f} s (target <= {TARGET_SECONDS:.0f} s: {verdict});")
    print(f"    {speed}x real time; {result['ms_per_replayed_minute']} ms per minute replayed")
    for name in ("cost", "host_hours", "launches", "returns"):
        was, now = result["recorded"][name], result["replayed"][name]
        change = f"{(now - was) / was * 100:+.1f} %" if was else "n/a"
        print(f"  {name}: recorded {was}, replayed {now} ({change})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 1 if args.check and result["verdict"] != "PASS" else 0


if __name__ == "__main__":
    sys.exit(main())
