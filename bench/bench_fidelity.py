"""Benchmark: replay fidelity against the real daemon (issue 32, "Benchmarks and checks").

Run (root: simulated hosts): ``.venv/bin/python bench/bench_fidelity.py [--minutes 60]
[--idle-a 60] [--idle-b 240] [--workdir DIR] [--sequential] [--quick] [--real-only | --replay-only]
[--replay-with cli|library] [--check]``.

**Two real runs.** For ``idle_time`` A and B, a real ``xceprov daemon`` runs in a simulated world
of its own (``xceprov sim up`` with simulated hosts in a test lab of its own; site under
``DIR/a`` and ``DIR/b``; the two run at the same time unless ``--sequential``). Template ``fb``
joins at first boot from a baked image (``xceprov image bake fb --from debian-12`` first) and
has two offerings on provider ``sim``: ``c4.large`` in zone ``a`` (0.17/h, the cheapest) and in
zone ``b`` (0.19/h); ``hold_time`` 0 (``idle_time`` alone decides the returns), reconcile every
5 s. The same seeded schedule drives both (``bench/fidelity_model.py``: bursts of work, quiet
gaps between ``idle_time`` A and B, a capacity refusal window on ``c4.large@a`` (``xceprov sim
fault capacity c4.large 0 --zone a``, then ``--clear``), one spot interruption notice to a busy
host (``xceprov sim fault spot-notice ID --lead 60s``). At the schedule's end (every host
returned by then) the bench reads **what happened** over ``[start, end]``: ``xceprov cost
--json --since --until`` (cost; host-hours = the instances' seconds / 3600), the cloud's own
bill beside it, and exports the daemon's flight recording of the period (``xceprov record
export``). Everything is saved in ``DIR`` (``real.json``, ``recording.jsonl.gz``, the site's
configuration), so that ``--replay-only`` compares again without running the daemon.

**The replays.** ``xceprov replay DIR/a/recording.jsonl.gz --config C --json`` with C = run A's
configuration (same) and with C = the same but ``idle_time`` B. Checks: host-hours and cost of
replay A→A within 5 % of real A; the predicted change has the real change's (real B − real A)
direction and is within 10 % of its size. The predicted change is the one the replay prints:
replay A→B − recorded (what recording A shows happened); the model change (replay A→B − replay
A→A) is printed beside it. Both real runs are counted over the replay's period (the recording's
first record to its last), from the same offsets of their own starts. A table, PASS/MISS per
check, and ``DIR/result.json``; ``--check``: exit 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.bench_daemon import report
from bench.fidelity_model import clipped_figures, compare, replay_runs, table, verdicts, workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = ROOT / "bench" / "results" / "fidelity"
LABELS = ("a", "b")


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}  load {os.getloadavg()[0]:.1f}", flush=True)


def real_runs(args: argparse.Namespace) -> None:
    """Both real runs, each a child process (``bench/fidelity_run.py``) writing ``DIR/LABEL``;
    at the same time unless ``--sequential``."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    schedule = workload(args.minutes, args.idle_a, args.idle_b, args.seed)
    doc = {
        **schedule.to_json(),
        "minutes": args.minutes,
        "idle_a": args.idle_a,
        "idle_b": args.idle_b,
        "seed": args.seed,
    }
    (args.workdir / "schedule.json").write_text(json.dumps(doc, indent=1))
    log(
        f"schedule: {len(schedule.bursts)} bursts, {len(schedule.works)} works, "
        f"{sum(w.hosts for w in schedule.works)} hosts' worth, ends at {schedule.end:g} s"
    )
    procs: list[tuple[str, subprocess.Popen[bytes], float]] = []
    for label, idle in zip(LABELS, (args.idle_a, args.idle_b), strict=True):
        command = [
            sys.executable,
            str(ROOT / "bench" / "fidelity_run.py"),
            "--label",
            label,
            "--idle",
            f"{idle:g}",
            "--workdir",
            str(args.workdir),
        ]
        (args.workdir / label).mkdir(parents=True, exist_ok=True)
        out = open(args.workdir / f"run-{label}.log", "wb")  # noqa: SIM115 (kept open for the child)
        log(f"real run {label} (idle_time {idle:g} s): log {out.name}")
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        procs.append((label, proc, time.monotonic()))
        if args.sequential:
            proc.wait()
    for label, proc, began in procs:
        code = proc.wait()
        log(f"real run {label}: exit {code} after {time.monotonic() - began:.0f} s")
        if code != 0:
            raise SystemExit(f"real run {label} failed (exit {code}): see {args.workdir}/run-{label}.log")


def replay(workdir: Path, recording: Path, config: Path, name: str, how: str) -> dict[str, dict[str, float]]:
    """``xceprov replay RECORDING --config CONFIG --json`` (``how`` ``library``: the functions it
    runs, in this process); its figures, the output kept in ``replay-NAME.json``."""
    began = time.monotonic()
    if how == "library":
        text = json.dumps(replay_in_process(recording, config, workdir / f"replay-{name}.state"))
    else:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "replay", str(recording), "--config", str(config), "--json"],
            cwd=workdir,
            env={**os.environ, "XCEPROV_CONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"xceprov replay ({name}): exit {done.returncode}\n{done.stderr[-3000:]}")
        text = done.stdout
    (workdir / f"replay-{name}.json").write_text(text)
    runs = replay_runs(json.loads(text))
    log(f"replay {name} ({how}): {time.monotonic() - began:.1f} s: {json.dumps(runs)}")
    if "replayed" not in runs:
        raise SystemExit(f"replay {name}: no replayed figures in its JSON (replay-{name}.json)")
    return runs


def replay_in_process(recording: Path, config: Path, state_dir: Path) -> dict[str, Any]:
    """What ``xceprov replay --json`` computes (docs/replay.md), through the library: the model
    of the recording replayed under ``config``, and what the recording shows happened."""
    from orchestrator.configfile import load_config
    from orchestrator.replay.recorded import figures_of_recording, model_of_recording
    from orchestrator.replay.runner import run_replay
    from orchestrator.workspace.recordings import load_recording

    shutil.rmtree(state_dir, ignore_errors=True)
    records = load_recording(recording)
    loaded = load_config(str(config)).config
    replayed = run_replay(loaded, model_of_recording(records), state_dir=state_dir)
    return {"recorded": figures_of_recording(records, loaded).to_json(), "replayed": replayed.to_json()}


def candidate(config: Path, idle: float | None, out: Path) -> Path:
    """``config`` as it is, with ``idle`` every provider's ``idle_time`` set to that many
    seconds, written to ``out`` (a replay takes a site's configuration as it is: ``bake:newest``
    and first-boot templates included, docs/replay.md)."""
    cfg: dict[str, Any] = yaml.safe_load(config.read_text())
    if idle is not None:
        for provider in cfg["providers"].values():
            provider["idle_time"] = f"{idle:g}s"
    out.write_text(yaml.safe_dump(cfg))
    return out


def compare_runs(args: argparse.Namespace) -> dict[str, Any]:
    """The replays of recording A with configurations A and B, against the two real runs."""
    real = {label: json.loads((args.workdir / label / "real.json").read_text()) for label in LABELS}
    recording = args.workdir / "a" / "recording.jsonl.gz"
    site = args.workdir / "a" / "site" / "xceprov.yaml"
    config_a = candidate(site, None, args.workdir / "a" / "config-a.yaml")
    config_b = candidate(site, real["b"]["idle_time"], args.workdir / "a" / "config-idle-b.yaml")
    same = replay(args.workdir, recording, config_a, "a-a", args.replay_with)
    other = replay(args.workdir, recording, config_b, "a-b", args.replay_with)
    window = period(real, same["replayed"])
    log(f"the replay's period: +{window[0]:g} s to +{window[1]:g} s of each run's start")
    clipped = {
        label: clipped_figures(
            json.loads((args.workdir / label / "cost.json").read_text()),
            real[label]["t0"] + window[0],
            real[label]["t0"] + window[1],
        )
        for label in LABELS
    }
    found = compare(clipped["a"], clipped["b"], same["replayed"], other["replayed"], same.get("recorded"))
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "minutes": real["a"]["minutes"],
        "idle_a": real["a"]["idle_time"],
        "idle_b": real["b"]["idle_time"],
        "replay_with": args.replay_with,
        "period_s": list(window),
        "real_in_period": clipped,
        "real": real,
        "replay_a_a": same,
        "replay_a_b": other,
        "fidelity": found,
    }


def period(real: dict[str, Any], replayed: dict[str, float]) -> tuple[float, float]:
    """The replay's period in seconds from run A's start (the real figures of both runs are
    clipped to it: what the replay counts); the whole run when its JSON says none."""
    t0, end = real["a"]["t0"], real["a"]["end"]
    start = replayed.get("start", t0)
    stop = replayed.get("end", end)
    return round(max(0.0, start - t0), 3), round(min(end, stop) - t0, 3)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None, help="the period work is submitted over (60)")
    parser.add_argument("--idle-a", type=float, default=None, help="idle_time of run A, seconds (60)")
    parser.add_argument("--idle-b", type=float, default=None, help="idle_time of run B, seconds (240)")
    parser.add_argument("--seed", type=int, default=32, help="the workload's seed")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="where runs and results are kept")
    parser.add_argument("--sequential", action="store_true", help="run A, then B (default: both at once)")
    parser.add_argument("--quick", action="store_true", help="6 minutes, idle_time 30 s and 120 s (unless given)")
    parser.add_argument("--real-only", action="store_true", help="the real runs only (no replay)")
    parser.add_argument("--replay-only", action="store_true", help="compare the runs saved in --workdir again")
    parser.add_argument(
        "--replay-with",
        choices=("cli", "library"),
        default="cli",
        help="xceprov replay (default), or the functions it runs, in process",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a check is missed")
    args = parser.parse_args(argv)
    for name, (quick, full) in {"minutes": (6.0, 60.0), "idle_a": (30.0, 60.0), "idle_b": (120.0, 240.0)}.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.minutes <= 0 or not 0 < args.idle_a < args.idle_b:
        parser.error("--minutes must be > 0, and 0 < --idle-a < --idle-b")
    if args.real_only and args.replay_only:
        parser.error("--real-only and --replay-only exclude each other")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or read) the real runs, replay, print the table and the verdicts, write result.json."""
    args = parse(argv)
    args.workdir = args.workdir.resolve()
    if not args.replay_only:
        real_runs(args)
    if args.real_only:
        return 0
    results = compare_runs(args)
    (args.workdir / "result.json").write_text(json.dumps(results, indent=1))
    print(table(results["fidelity"]))
    return report(results["fidelity"], verdicts(results["fidelity"]), args.check)


if __name__ == "__main__":
    sys.exit(main())
