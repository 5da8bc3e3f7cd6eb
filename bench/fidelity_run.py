"""One real run of the fidelity benchmark (``bench/bench_fidelity.py`` starts one per idle_time).

Run (root): ``.venv/bin/python bench/fidelity_run.py --label a --idle 60 --workdir DIR``: reads
``DIR/schedule.json``, runs a real ``xceprov daemon`` in a simulated world with hosts under
``DIR/LABEL/site`` (its own lab, controller port and cluster), drives the schedule, and writes
``DIR/LABEL/real.json`` (what happened) and ``DIR/LABEL/recording.jsonl.gz`` (the daemon's
flight recording of the period). The site (configuration, daemon log, stores) is kept for the
replays; its world is stopped (``xceprov sim down``) at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sim_world_helpers import can_run_hosts  # type: ignore[import-not-found]

from bench.bench_spot import Daemon, wait_for
from bench.fidelity_model import NOTICE_LEAD, bill_figures, counts, real_figures

TEMPLATE = "fb"
FLAVOR = "c4.large"
OFFERINGS = (
    {"flavor": FLAVOR, "zone": "a", "cost_per_hour": 0.17},
    {"flavor": FLAVOR, "zone": "b", "cost_per_hour": 0.19},
)
CHEAP_ZONE = "a"
MAX_INSTANCES = 16


def log(label: str, line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [{label}] {line}  load {os.getloadavg()[0]:.1f}", flush=True)


def configure(world: Any, idle: float, offerings: bool) -> None:
    """The run's site: provider ``sim`` (``idle_time`` ``idle``, ``hold_time`` 0), template ``fb``
    (first boot from ``bake:newest``; with ``offerings`` the two of :data:`OFFERINGS`, else the
    cheap one alone: the bake's builder), reconcile every 5 s."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["providers"]["sim"].update(
        {
            "max_instances": MAX_INSTANCES,
            "hold_time": "0s",
            "idle_time": f"{idle:g}s",
            "join_deadline": "10m",
        }
    )
    cfg["daemon"] = {"reconcile_interval": "5s", "stop_timeout": "60s"}
    cfg["ansible"] = {"timeout": "3600s"}
    fb = json.loads(json.dumps(cfg["templates"].get("cpu") or cfg["templates"][TEMPLATE]))
    side = {"image": "bake:newest"}
    if offerings:
        side["offerings"] = list(OFFERINGS)
    else:
        side.update(flavor=FLAVOR, cost_per_hour=OFFERINGS[0]["cost_per_hour"])
    fb["providers"] = {"sim": side}
    fb["bootstrap"] = {**fb.get("bootstrap", {}), "mode": "first-boot"}
    cfg["templates"] = {TEMPLATE: fb}
    path.write_text(yaml.safe_dump(cfg))


def fresh_site(site: Path) -> None:
    """A site left by an earlier run: its world stopped, then removed."""
    if not site.exists():
        return
    if (site / "xceprov.yaml").exists():
        subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "sim", "down"],
            cwd=site,
            env={**os.environ, "XCEPROV_CONFIG": str(site / "xceprov.yaml")},
            capture_output=True,
            timeout=300,
            check=False,
        )
    shutil.rmtree(site)


def notice_one(world: Any, label: str) -> dict[str, Any]:
    """A spot interruption notice to one host of the template: the busy one that joined first
    (else the oldest live instance); what was noticed."""
    alive = world.alive()
    hosts = [h for h in world.hosts().values() if h.template == TEMPLATE and h.instance_key in alive]
    busy = sorted((h for h in hosts if h.state == "busy"), key=lambda h: h.joined_at)
    if busy:
        key = busy[0].instance_key
    elif alive:
        key = min(alive, key=lambda k: str(alive[k].launch_time))
    else:
        log(label, "notice: no live instance to notice")
        return {"at": time.time(), "key": None}
    world.ok("sim", "fault", "spot-notice", alive[key].id, "--lead", f"{NOTICE_LEAD:g}s")
    log(label, f"notice to {key} ({'busy' if busy else 'not busy'}), reclaim in {NOTICE_LEAD:g} s")
    return {"at": time.time(), "key": key, "busy": bool(busy)}


def progress(world: Any) -> str:
    hosts = [h for h in world.hosts().values() if h.template == TEMPLATE]
    states = counts([{"state": h.state} for h in hosts], "state")
    return f"{len(world.alive())} live instances, hosts {states}"


def drive(world: Any, label: str, schedule: dict[str, Any], t0: float, daemon: Daemon) -> dict[str, Any]:
    """The schedule's actions at their times from ``t0``; the notice's record."""
    from orchestrator.sim.controller import admin

    found: dict[str, Any] = {}
    zone = ("--zone", CHEAP_ZONE)
    actions: list[tuple[float, str, Callable[[], None]]] = []
    for w in schedule["works"]:
        actions.append(
            (
                w["at"],
                f"submit {w['hosts']} hosts x {w['duration']:g} s",
                lambda w=w: admin.submit(world.sim, TEMPLATE, w["hosts"], w["duration"]),
            )
        )
    actions.append(
        (
            schedule["refuse_from"],
            "capacity 0 on c4.large@a",
            lambda: world.ok("sim", "fault", "capacity", FLAVOR, "0", *zone),
        )
    )
    actions.append(
        (
            schedule["refuse_until"],
            "capacity cleared on c4.large@a",
            lambda: world.ok("sim", "fault", "capacity", FLAVOR, "--clear", *zone),
        )
    )
    actions.append((schedule["notice_at"], "spot notice", lambda: found.update(notice=notice_one(world, label))))
    actions.sort(key=lambda a: a[0])
    last = time.monotonic()
    for at, what, act in [*actions, (schedule["end"], "end", lambda: None)]:
        while time.time() < t0 + at:
            daemon.leased()  # raises when the daemon exited
            time.sleep(min(1.0, max(0.0, t0 + at - time.time())))
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                log(label, f"t+{time.time() - t0:.0f} s: {progress(world)}")
        late = time.time() - (t0 + at)
        act()
        found.setdefault("late_s", []).append(round(late, 2))
        log(label, f"t+{at:g} s: {what} (late {late:.1f} s)")
    return found


def read_back(world: Any, label: str, t0: int, end: int, out: Path) -> dict[str, Any]:
    """What happened over ``[t0, end]``, and the recording of the period written to ``out``."""
    since, until = str(t0), str(end)
    exported = world.xceprov("record", "export", "--since", since, "--until", until, "-o", str(out), "--json-summary")
    assert exported.returncode == 0, f"record export: exit {exported.returncode}\n{exported.stderr}"
    cost = json.loads(world.ok("cost", "--json", "--since", since, "--until", until, timeout=300))
    bill = json.loads(world.ok("sim", "cloud", "bill", "--json", "--since", since, "--until", until))
    requests = json.loads(world.ok("sim", "cloud", "requests", "--json", "--since", since))
    rows = [r for r in requests.get("requests", []) if r.get("action", "create") == "create"]
    (out.parent / "cost.json").write_text(json.dumps(cost, indent=1))
    (out.parent / "bill.json").write_text(json.dumps(bill, indent=1))
    try:
        summary: Any = json.loads(exported.stderr)
    except ValueError:
        summary = exported.stderr.strip()[-2000:]
    return {
        "figures": real_figures(cost),
        "bill": bill_figures(bill),
        "creates_by_outcome": counts(rows, "outcome"),
        "creates_by_offering": counts([r for r in rows if r.get("outcome") == "created"], "offering"),
        "live_at_end": len(world.alive()),
        "recording_summary": summary,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sim_labs import claim_test_lab  # type: ignore[import-not-found]
    from sim_world_helpers import sim_world

    from bench.bench_firstboot import bake
    from orchestrator.sim.hosts import lab as labnet

    label, here = args.label, args.workdir / args.label
    schedule = json.loads((args.workdir / "schedule.json").read_text())
    here.mkdir(parents=True, exist_ok=True)
    fresh_site(here / "site")
    began = time.monotonic()
    lab = claim_test_lab(f"bench-fidelity-{label}-{os.getpid()}")
    try:
        with sim_world(here / "site", f"fid{label}-{secrets.token_hex(3)}", lab) as world:
            configure(world, args.idle, offerings=False)
            baked = bake(world)
            log(label, f"bake: {baked}")
            configure(world, args.idle, offerings=True)
            daemon = Daemon(world)
            try:
                wait_for("the daemon's lease of sim", daemon.leased, 300, 0.5, daemon)
                time.sleep(3)
                t0 = math.floor(time.time())
                log(label, f"t0 {t0}: the schedule starts (ends at +{schedule['end']:g} s)")
                driven = drive(world, label, schedule, t0, daemon)
            finally:
                daemon.stop()
            end = t0 + math.ceil(schedule["end"])
            began_at = {"label": label, "idle_time": args.idle, "t0": t0, "end": end, "bake": baked}
            (here / "run.json").write_text(json.dumps(began_at))  # kept should reading back fail
            found = read_back(world, label, t0, end, here / "recording.jsonl.gz")
    finally:
        labnet.destroy_lab(lab)
    return {
        "label": label,
        "idle_time": args.idle,
        "minutes": schedule.get("minutes"),
        "t0": t0,
        "end": end,
        "wall_s": round(time.monotonic() - began, 1),
        "bake": baked,
        "notice": driven.get("notice"),
        "late_s_max": max(driven.get("late_s", [0.0])),
        **found,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--idle", type=float, required=True, help="idle_time, seconds")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args(argv)
    if not can_run_hosts():
        print("fidelity_run: simulated hosts need root and pycapnp", file=sys.stderr)
        return 2
    results = run(args)
    (args.workdir / args.label / "real.json").write_text(json.dumps(results, indent=1))
    log(args.label, f"what happened: {json.dumps(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
