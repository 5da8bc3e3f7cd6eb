#!/usr/bin/env python3
"""Write the shipped workload trace ``traces/model-day.swf`` (Standard Workload Format) from its model.

Run from the checkout: ``.venv/bin/python scripts/make_trace.py`` (``--check``: change nothing,
exit 1 when the shipped file differs from what the model gives; ``-o FILE``: write elsewhere;
``--seed``/``--jobs-per-day``: another draw of the same model). The trace is what
``xceprov replay`` and its tests read when no recording is at hand (docs/replay.md, "From a
workload trace (SWF)"); ``tests/unit/replay/test_replay_swf.py`` fails while the shipped file
is not what this writes, so the model the header states is the one that made the file.

The model (one day from 2024-01-01T00:00:00Z, seeded, standard library only):

* arrivals: a Poisson process whose rate follows a daily cycle,
  ``rate(t) = mean * (1 + 0.6 * cos(2π (t - 14h) / 24h))`` (busiest at 14:00, quietest at
  02:00), drawn by thinning; submit times in whole seconds;
* run times: log-normal, median 15 minutes (``μ = ln 900``, ``σ = 1``), kept within
  1 minute and 6 hours, whole seconds;
* processors: a power of two, 1, 2, 4, 8 or 16 with weights 40, 25, 20, 10, 5;
* users 1 to 16 uniformly; every job in queue 1 and partition 1, status 1 (completed);
  fields a model does not know (wait time, memory, ...) are -1.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "traces" / "model-day.swf"
SEED = 32
JOBS_PER_DAY = 300
DAY = 86400
START = 1_704_067_200  # 2024-01-01T00:00:00Z
PEAK = 14 * 3600
SWING = 0.6
MEDIAN_RUN = 900.0
SIGMA_RUN = 1.0
RUN_RANGE = (60, 6 * 3600)
PROCESSORS = (1, 2, 4, 8, 16)
PROCESSOR_WEIGHTS = (40, 25, 20, 10, 5)
USERS = 16


def _rate(t: float, mean: float) -> float:
    return mean * (1.0 + SWING * math.cos(2.0 * math.pi * (t - PEAK) / DAY))


def jobs(seed: int = SEED, jobs_per_day: int = JOBS_PER_DAY, days: int = 1) -> list[tuple[int, int, int, int]]:
    """(submit, run time, processors, user) of each job of the model's ``days``, in submit order."""
    rng = random.Random(seed)
    mean = jobs_per_day / DAY
    top = mean * (1.0 + SWING)
    out: list[tuple[int, int, int, int]] = []
    t = 0.0
    while True:
        t += rng.expovariate(top)
        if t >= days * DAY:
            return out
        if rng.random() * top > _rate(t, mean):
            continue  # thinned: the cycle's rate is below the top here
        run = rng.lognormvariate(math.log(MEDIAN_RUN), SIGMA_RUN)
        run_time = int(min(max(round(run), RUN_RANGE[0]), RUN_RANGE[1]))
        processors = rng.choices(PROCESSORS, weights=PROCESSOR_WEIGHTS)[0]
        out.append((int(t), run_time, processors, rng.randint(1, USERS)))


def trace(seed: int = SEED, jobs_per_day: int = JOBS_PER_DAY, days: int = 1) -> str:
    """The whole trace file: the header comments (the model and its seed), one line per job;
    ``days`` > 1: the same model over more days (``bench/bench_replay.py``'s week)."""
    drawn = jobs(seed, jobs_per_day, days)
    end = time.strftime("%a %b %e %H:%M:%S UTC %Y", time.gmtime(START + days * DAY))
    header = [
        "Version: 2.2",
        "Computer: a model, not a machine (scripts/make_trace.py)",
        "Installation: xce-provisioner's shipped trace for replays, tests and docs",
        "Acknowledge: generated data; no site's log",
        "Information: docs/replay.md, From a workload trace (SWF)",
        f"MaxJobs: {len(drawn)}",
        f"MaxRecords: {len(drawn)}",
        "Preemption: No",
        f"UnixStartTime: {START}",
        "TimeZoneString: UTC",
        "StartTime: Mon Jan  1 00:00:00 UTC 2024",
        f"EndTime: {end}",
        f"MaxProcs: {max(PROCESSORS)}",
        "MaxQueues: 1",
        "Queues: queue 1 is the only queue",
        "MaxPartitions: 1",
        "Partitions: partition 1 is the only partition",
        f"Note: model: Poisson arrivals, {jobs_per_day} jobs a day on average,",
        f"Note: rate x (1 + {SWING} cos(2 pi (t - 14h) / 24h)) (busiest at 14:00);",
        f"Note: run times log-normal, median {MEDIAN_RUN:g} s, sigma {SIGMA_RUN:g},",
        f"Note: within {RUN_RANGE[0]}..{RUN_RANGE[1]} s;",
        f"Note: processors 1/2/4/8/16 weighted {'/'.join(map(str, PROCESSOR_WEIGHTS))}; users 1..{USERS}; seed {seed}",
    ]
    lines = [f"; {h}" for h in header]
    for number, (submit, run, processors, user) in enumerate(drawn, start=1):
        fields = (number, submit, -1, run, processors, -1, -1, processors, -1, -1, 1, user, -1, -1, 1, 1, -1, -1)
        lines.append(" ".join(str(f) for f in fields))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("-o", "--output", type=Path, default=TRACE, help="where to write (default: the shipped trace)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs-per-day", type=int, default=JOBS_PER_DAY)
    parser.add_argument("--days", type=int, default=1, help="how many days of the model (default 1: the shipped trace)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the file differs")
    args = parser.parse_args(argv)
    text = trace(args.seed, args.jobs_per_day, args.days)
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != text:
            print(f"{args.output}: not what scripts/make_trace.py writes; run it", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
