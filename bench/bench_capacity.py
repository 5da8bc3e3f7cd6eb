"""Benchmark: capacity and quota refusals through the daemon (issue 31, "Benchmarks and checks").

Run: ``.venv/bin/python bench/bench_capacity.py [--hosts 20] [--rounds 3] [--probe-seconds 150]
[--capacity-base 30] [--quota-seconds 600] [--only burst,quota] [--layout offerings|providers]
[--quick] [--keep DIR] [--out FILE] [--check]``.

Each scenario runs in a simulated world of its own (``xceprov sim up --only controller``: the
simulated controller and cloud behind real Terraform, no simulated hosts: instances are counted
in the cloud, nobody joins) through a real ``xceprov daemon`` process, as a site runs it. The
template ``cpu`` has four offerings on provider ``sim`` (``--layout offerings``): two flavors in
two zones, zone ``z1`` the cheaper; its hosts start with ``bootstrap.mode: first-boot`` (no play
runs against hosts that do not exist) and are never returned while the bench runs (long join
deadline, hold and idle times). ``--layout providers`` runs the same scenarios with one flavor
per provider on four providers (the fallback across providers that existed before offerings).

- ``baseline``: no refusal; demand for ``--hosts`` (one piece of work of N hosts, what ``xceprov
  sim submit`` sends) at t0, once the daemon holds its lease and its start's orphan scan has read
  (and so initialised) the working directories; the time to N instances **running in the cloud**
  (created, not joined: there are no hosts to join), the cloud polled every 0.1 s.
- ``refusing``: the same, with the two cheapest offerings (``z1``) at capacity 0 (``xceprov sim
  fault capacity FLAVOR 0 --zone z1``): each refuses every create. Then, so that the daemon has
  to keep probing, the two others are capped at what they hold and a second demand of
  ``--probe-hosts`` arrives; the daemon runs ``--probe-seconds`` more. From the cloud's request
  journal (``xceprov sim cloud requests --json --since T0``: one row per create request), per
  offering: its create attempts (``bench/capacity_journal.py``: one apply's requests on it), and
  the most attempts within one probe interval after a refusal. ``policy.capacity_backoff`` is
  ``{base: --capacity-base, max: 4 × base}``; the shortest probe interval is half the base (the
  backoff's jitter). Deletes in the mutation journal are counted too (none expected).
- ``quota``: ``--quota-live`` instances (5) are made first (a demand of as many), then the
  account's quota is set to what runs (``xceprov sim fault quota 5``: the cloud refuses every
  further create for quota); demand for ``--quota-hosts`` more (10); the daemon runs
  ``--quota-seconds`` (600; ``--quick``: 60). A loop that deleted and created again would show
  on the instances already running. Then: instances created (request journal) and created or
  deleted (mutation journal) over the window, the ``quota`` reasons of the template in
  ``xceprov status --json`` and in the simulated controller's status.

``baseline`` and ``refusing`` run ``--rounds`` times each, alternating which goes first, each
burst in a fresh world; the fastest of each counts (the machine's other work only slows a run
down), the probing phase follows the last refusing burst.

Targets (``--check``: exit 1 when one is missed): refusing / baseline time to N running <= 2;
per refusing offering at most one create attempt per probe interval; no instance deleted; with
quota refusals none created and none deleted, and exactly one ``quota`` reason shown (status and
controller); a refusing offering or a quota window the journal shows no refusal for is a miss
(the fault did not bite). The tables of docs/performance.md, the verdicts and the JSON summary
are printed; the summary is also written to ``--out`` (default
``bench/results/bench_capacity.json``, not committed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.bench_daemon import report
from bench.bench_firstboot import Daemon as FirstBootDaemon
from bench.bench_firstboot import status_doc, wait_for
from bench.capacity_journal import (
    attempts,
    audit_counts,
    burst_row,
    markdown,
    probe_floor,
    probing,
    requests_of,
    verdicts,
)
from orchestrator.model.backoff import Backoff
from orchestrator.model.offerings import offering_name

PARTS = ("burst", "quota")
TEMPLATE = "cpu"
PROVIDER = "sim"
WORK_SECONDS = 600.0  # the demand's work; it never runs (nobody joins), the demand stays
RESULTS = Path(__file__).resolve().parent / "results" / "bench_capacity.json"


def load() -> str:
    """The 1-minute load average, printed with every figure."""
    return f"{os.getloadavg()[0]:.1f}"


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}  load {load()}", flush=True)


# -- the offerings of the run and the world's configuration ---------------------------------------


@dataclass(frozen=True)
class Offer:
    """One place instances can go: on ``provider``, ``flavor`` in ``zone`` (None: no zone)."""

    provider: str
    flavor: str
    zone: str | None
    cost: float

    @property
    def name(self) -> str:
        """The offering's name in the journal and the status (``flavor[@zone]``)."""
        return offering_name(self.flavor, self.zone, None)


def offers(layout: str) -> list[Offer]:
    """Four offers, cheapest first: the first two refuse in the ``refusing`` scenario."""
    if layout == "providers":  # one flavor each: the capacity fault is per flavor
        return [
            Offer("sim1", "c4.z1", None, 0.20),
            Offer("sim2", "c8.z1", None, 0.22),
            Offer("sim3", "c4.z2", None, 0.24),
            Offer("sim4", "c8.z2", None, 0.26),
        ]
    return [
        Offer(PROVIDER, "c4.large", "z1", 0.20),
        Offer(PROVIDER, "c8.large", "z1", 0.22),
        Offer(PROVIDER, "c4.large", "z2", 0.24),
        Offer(PROVIDER, "c8.large", "z2", 0.26),
    ]


def configure(world: Any, layout: str, capacity_base: float, max_instances: int) -> None:
    """The site of the run (the module docstring): template ``cpu`` on the ``layout``'s offers."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    sim = cfg["providers"].pop(PROVIDER)
    sim.update({"max_instances": max_instances, "join_deadline": "60m", "hold_time": "60m", "idle_time": "60m"})
    side = {"image": "debian-12"}
    template = cfg["templates"][TEMPLATE]
    template["bootstrap"] = {**template.get("bootstrap", {}), "mode": "first-boot"}
    mine = offers(layout)
    if layout == "providers":
        cfg["providers"] = {o.provider: {**sim, "priority": 100 - i} for i, o in enumerate(mine)}
        template["providers"] = {o.provider: {**side, "flavor": o.flavor, "cost_per_hour": o.cost} for o in mine}
    else:
        cfg["providers"] = {PROVIDER: sim}
        listed = [{"flavor": o.flavor, "zone": o.zone, "cost_per_hour": o.cost} for o in mine]
        template["providers"] = {PROVIDER: {**side, "offerings": listed}}
    cfg["templates"] = {TEMPLATE: template}
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": "30s"}
    cfg["policy"] = {
        "cooldown": "1s",
        # Nothing else retried while the bench watches: a transient failure would show as a probe.
        "retry": {"base": "3600s", "max": "3600s"},
        "capacity_backoff": {"base": f"{capacity_base:g}s", "max": f"{4 * capacity_base:g}s"},
        "quota_backoff": {"base": "10m", "max": "2h"},
    }
    path.write_text(yaml.safe_dump(cfg))


def refuse(world: Any, offer: Offer, live: int) -> None:
    """The cloud allows at most ``live`` live instances of ``offer`` (0: it refuses every create)."""
    zone = ("--zone", offer.zone) if offer.zone else ()
    world.ok("sim", "fault", "capacity", offer.flavor, str(live), *zone)


# -- reading the world ----------------------------------------------------------------------------


def live_instances(world: Any) -> list[dict[str, Any]]:
    """The cluster's running instances (``xceprov sim cloud list --json``, read in process)."""
    from orchestrator.model.tags import CLUSTER

    doc = json.loads(world.ok("sim", "cloud", "list", "--json", "--tag", f"{CLUSTER}={world.cluster}"))
    return [i for i in doc["instances"] if i["state"] == "running"]


def running_count(world: Any) -> int:
    """How many of the cluster's instances run (the store read directly: polled often)."""
    return len(world.alive())


def placed(world: Any) -> dict[str, int]:
    """The cluster's running instances per offering name."""
    return dict(Counter(offering_name(i["flavor"], i.get("zone") or None, None) for i in live_instances(world)))


def journal(world: Any, since: float) -> dict[str, Any]:
    """``xceprov sim cloud requests --json --since SINCE``: the create requests since then."""
    return dict(json.loads(world.ok("sim", "cloud", "requests", "--json", "--since", str(int(since)))))


def mutations_since(world: Any, since: float) -> Counter[str]:
    """The cluster's mutations (create, delete, ...) since ``since``, counted by action."""
    return Counter(m.action for m in world.store.mutations() if m.at >= since and m.cluster == world.cluster)


def status_json(world: Any) -> dict[str, Any]:
    return dict(json.loads(world.ok("status", "--json", timeout=120)))


def quota_reasons(reasons: Any, template: str) -> int:
    """How many ``quota`` reasons ``reasons`` holds for ``template``: a mapping template → list
    (``status --json``) or a list of entries naming their template (the controller's status)."""
    if isinstance(reasons, dict):
        entries = list(reasons.get(template) or [])
    else:
        entries = [r for r in reasons or [] if r.get("template") == template]
    return sum(1 for r in entries if r.get("code") == "quota")


# -- the daemon -----------------------------------------------------------------------------------


class Daemon(FirstBootDaemon):
    """A real ``xceprov daemon`` process of the world, its output in a file (as bench_firstboot's,
    without CPU groups: nothing is timed by CPU here)."""

    def __init__(self, world: Any, name: str) -> None:
        self.world = world
        self.log = world.site / f"daemon-{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "daemon"],
                cwd=world.site,
                env=world.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def ready(self) -> bool:
        """Leases held and the start's orphan scan done (it reads, and so initialises, every
        provider's working directory: Terraform's init is not part of any burst)."""
        self.alive()
        doc = status_doc(self.world)
        leases = doc.get("leases") or []
        scanned = bool((doc.get("orphans") or {}).get("last_scan"))
        return bool(leases) and all(row.get("held") for row in leases) and scanned


def watch(daemon: Daemon, seconds: float, label: str, world: Any) -> None:
    """Let the daemon run ``seconds`` (it must stay up), a progress line every 30 s."""
    end = time.monotonic() + seconds
    last = time.monotonic()
    while time.monotonic() < end:
        daemon.alive()
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            log(f"  {label}: {running_count(world)} running, {end - time.monotonic():.0f} s to go")


def start_daemon(world: Any, name: str) -> Daemon:
    daemon = Daemon(world, name)
    wait_for("the daemon's leases and first orphan scan", daemon.ready, 300, 0.5, daemon.tail)
    time.sleep(3)  # its pass after the scan ends
    return daemon


def burst(world: Any, daemon: Daemon, label: str, hosts: int, timeout: float) -> dict[str, Any]:
    """Demand for ``hosts`` at t0 → ``hosts`` more instances running in the cloud."""
    from orchestrator.sim.controller import admin

    before = running_count(world)
    t0, began = time.monotonic(), time.time()
    admin.submit(world.sim, TEMPLATE, hosts, WORK_SECONDS)

    def done() -> bool:
        daemon.alive()
        return running_count(world) - before >= hosts

    wait_for(f"{hosts} instances running", done, timeout, 0.1, daemon.tail)
    seconds = time.monotonic() - t0
    row = burst_row(label, hosts, seconds, placed(world), audit_counts(world.audit(), began, began + seconds))
    log(
        f"{label}: {hosts} instances running {row['to_all_running_s']} s after the demand; placed {row['placed']}; "
        f"{row['ops']} create ops, {row['refused_ops']} refused, {row['returned_ops']} given back"
    )
    return row


# -- the scenarios --------------------------------------------------------------------------------


def one_burst(world: Any, args: argparse.Namespace, label: str, probe: bool) -> dict[str, Any]:
    """One burst in ``world`` through a daemon of its own; refusing (``label`` ``refusing``): the
    two cheapest offers at capacity 0 first, and with ``probe`` the probing phase after it."""
    from orchestrator.sim.controller import admin

    mine = offers(args.layout)
    cheap, others = mine[:2], mine[2:]
    if label == "refusing":
        for offer in cheap:
            refuse(world, offer, 0)
    daemon = start_daemon(world, label)
    try:
        t0 = time.time()
        row = burst(world, daemon, label, args.hosts, args.timeout)
        if not probe:
            return row
        holding = placed(world)
        for offer in others:
            refuse(world, offer, holding.get(offer.name, 0))
        admin.submit(world.sim, TEMPLATE, args.probe_hosts, WORK_SECONDS)
        log(f"probing: every offering full, demand for {args.probe_hosts} more, {args.probe_seconds:g} s")
        watch(daemon, args.probe_seconds, "probing", world)
        ended = time.time()
    finally:
        daemon.stop()
    floor = probe_floor(args.capacity_base, Backoff().jitter)
    found = probing(requests_of(journal(world, t0)), [o.name for o in mine], floor)
    for name, off in found.items():
        log(
            f"  {name}: {off['attempts']} attempts ({off['refused_attempts']} refused), {off['requests']} requests "
            f"{off['outcomes']}, gaps after a refusal {off['gaps_after_refusal_s']} s, "
            f"at most {off['per_interval']} per probe interval"
        )
    return {
        **row,
        "probe": {
            "refusing": [o.name for o in cheap],
            "seconds": round(ended - t0, 1),
            "capacity_base_s": args.capacity_base,
            "probe_floor_s": floor,
            "offerings": found,
            "deleted": mutations_since(world, t0).get("delete", 0),
        },
    }


def quota(world: Any, args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.sim.controller import admin

    daemon = start_daemon(world, "quota")
    try:
        if args.quota_live:  # instances the account already runs: a create/delete loop would show on them
            burst(world, daemon, "quota-live", args.quota_live, args.timeout)
        live = running_count(world)
        world.ok("sim", "fault", "quota", str(live))
        t0 = time.time()
        admin.submit(world.sim, TEMPLATE, args.quota_hosts, WORK_SECONDS)
        log(
            f"quota: the account at its quota ({live} live), demand for {args.quota_hosts} more, "
            f"{args.quota_seconds:g} s"
        )
        watch(daemon, args.quota_seconds, "quota", world)
        shown = status_json(world)
        controller = admin.status(world.sim)
    finally:
        daemon.stop()
    rows = [r for r in requests_of(journal(world, t0)) if r.at >= t0]
    changed = mutations_since(world, t0)
    created = max(sum(1 for r in rows if r.outcome == "created"), changed.get("create", 0))
    out = {
        "seconds": args.quota_seconds,
        "hosts": args.quota_hosts,
        "live": live,
        "requests": len(rows),
        "attempts": sum(len(tried) for tried in attempts(rows).values()),
        "outcomes": dict(Counter(r.outcome for r in rows)),
        "created": created,
        "deleted": changed.get("delete", 0),
        "status_reasons": (shown.get("reasons") or {}).get(TEMPLATE, []),
        "status_quota_reasons": quota_reasons(shown.get("reasons"), TEMPLATE),
        "controller_reasons": controller.get("reasons", []),
        "controller_quota_reasons": quota_reasons(controller.get("reasons"), TEMPLATE),
    }
    log(
        f"quota: {out['attempts']} create attempts, {out['requests']} requests {out['outcomes']}; "
        f"created {out['created']}, deleted {out['deleted']}; reasons: status {out['status_reasons']}, "
        f"controller {out['controller_reasons']}"
    )
    return out


def fresh_world(root: Path, name: str, args: argparse.Namespace) -> Any:
    """A world of its own (``sim up --only controller``, torn down at the end), configured."""
    from sim_world_helpers import sim_world  # type: ignore[import-not-found]

    @contextlib.contextmanager
    def made() -> Iterator[Any]:
        with sim_world(root / name, f"bcap-{name}-{secrets.token_hex(3)}") as world:
            configure(world, args.layout, args.capacity_base, 4 * (args.hosts + args.probe_hosts))
            yield world

    return made()


def bursts(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--rounds`` of a baseline and a refusing burst, alternating which goes first; the probing
    phase after the last refusing one. Per scenario: the best (fastest) burst and every time."""
    rows: dict[str, list[dict[str, Any]]] = {"baseline": [], "refusing": []}
    probed: dict[str, Any] = {}
    for r in range(args.rounds):
        for label in ("baseline", "refusing") if r % 2 == 0 else ("refusing", "baseline"):
            probe = label == "refusing" and r == args.rounds - 1
            with fresh_world(root, f"{label}-{r}", args) as world:
                row = one_burst(world, args, label, probe)
            probed.update(row.pop("probe", {}))
            rows[label].append({**row, "load": load()})
    out: dict[str, Any] = {}
    for label, found in rows.items():
        best = min(found, key=lambda row: row["to_all_running_s"])
        out[label] = {"burst": best, "rounds_s": [row["to_all_running_s"] for row in found]}
    out["refusing"].update(probed)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every part asked for, each world its own (the module docstring)."""
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count(),
        "layout": args.layout,
        "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-capacity-")))
        if "burst" in args.only:
            results.update(bursts(root, args))
        if "quota" in args.only:
            with fresh_world(root, "quota", args) as world:
                results["quota"] = {**quota(world, args), "load": load()}
    results["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return results


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20, help="the burst (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per scenario (the fastest counts)")
    parser.add_argument("--probe-hosts", type=int, default=10, help="the demand left unmet while probing")
    parser.add_argument("--probe-seconds", type=float, default=None, help="how long the daemon probes (150)")
    parser.add_argument("--capacity-base", type=float, default=None, help="policy.capacity_backoff.base, s (30)")
    parser.add_argument("--quota-hosts", type=int, default=10, help="the demand refused for quota")
    parser.add_argument("--quota-live", type=int, default=5, help="instances running before the quota is reached")
    parser.add_argument("--quota-seconds", type=float, default=None, help="how long quota refusals last (600)")
    parser.add_argument("--only", default="burst,quota", help="comma-separated, of burst, quota")
    parser.add_argument("--layout", choices=("offerings", "providers"), default="offerings")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: defaults of 60 s quota, 10 s base, 50 s probing"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a burst")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON summary is written")
    parser.add_argument("--keep", type=Path, default=None, help="keep the worlds (daemon logs) in this new directory")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    args.only = [p for p in args.only.split(",") if p]
    unknown = sorted(set(args.only) - set(PARTS))
    if unknown:
        parser.error(f"--only: unknown part {', '.join(unknown)} (of {', '.join(PARTS)})")
    # What --quick shortens, unless given: (quick, full).
    for name, (quick, full) in {
        "quota_seconds": (60.0, 600.0),
        "capacity_base": (10.0, 30.0),
        "probe_seconds": (50.0, 150.0),
    }.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.quota_live < 0:
        parser.error("--quota-live must be 0 or more")
    if min(args.hosts, args.probe_hosts, args.quota_hosts, args.rounds) < 1:
        parser.error("--hosts, --probe-hosts, --quota-hosts and --rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print each figure and verdict (``--check``: exit 1 on a miss), write the JSON summary."""
    args = parse(argv)
    results = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    return report(results, verdicts(results), args.check)


if __name__ == "__main__":
    sys.exit(main())
