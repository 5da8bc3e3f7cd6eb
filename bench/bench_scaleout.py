"""Benchmark: several orchestrators on one database (issue 18): pg vs local, and takeover time.

Run: ``.venv/bin/python bench/bench_scaleout.py [--burst 500] [--scan 1000] [--ops 100]
[--rounds 2] [--parts burst,scan,takeover] [--check]``.

One private PostgreSQL for the run (``tests/pg_server.py``: initdb in a temporary directory, a
Unix socket only, removed at the end; as root it runs as ``postgres``), a fresh database of it
for every measurement, and a fresh simulated controller (its own process, free loopback port)
for every measurement. Timed, in the same run, alternating which backend goes first:

- ``burst``: ``Executor.create`` of a burst of N inside a fenced session holding the lease
  (as ``bench_executor.py`` times it), with ``terraform.backend: local`` and with ``pg``
  (Terraform's pg backend for every shard's state; desired sets and the rest in the shared
  store). Target: pg / local <= 1.2.
- ``scan``: one acting orphan scan over N instances of K ops (as ``bench_orphans.py`` builds and
  times it), local and pg. Target: pg / local <= 1.2.
- ``takeover``: two daemons (``tests/scaleout_world.py``) over four providers and one database
  of their own; the holder of two providers is killed with SIGKILL; timed from the kill to two
  moments of the survivor on one of the dead one's providers: its first cloud read (the end of
  its first Terraform plan in that provider's working directory, whose refresh reads the cloud:
  from the survivor's debug log, because the simulated cloud journals mutations only) and its
  first mutation (the simulated cloud's mutation journal, by the epoch of the run). Target:
  <= lease TTL + grace + one reconcile interval (the simulated controller's TTL, 15 s; the
  daemons' interval, 2 s).

Best of ``--rounds`` per path. Seconds depend on the machine and its load (printed with each
figure); ratios much less. ``--check``: exit code 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench.bench_executor import PROVIDER, TEMPLATE, check_burst, setup_raw_tool, simulated_controller, write_site
from bench.bench_orphans import build, timed_scan
from bench.bench_plan import REPO
from bench.bench_shards import load
from orchestrator.configfile import LoadedConfig, load_config
from orchestrator.model.instances import new_op_id
from orchestrator.ops.facts import LinkFacts
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.services.ops import fenced_session
from orchestrator.workspace.pgbackend import LOCAL_STATE

TARGET_BURST = 1.2
TARGET_SCAN = 1.2
BACKENDS = ("local", "pg")


class Databases:
    """One throw-away PostgreSQL server; a new database of it per measurement."""

    def __init__(self) -> None:
        from pg_server import PgServer

        self.server = PgServer()
        self.count = 0

    def fresh(self) -> str:
        """The connection string of a new, empty database."""
        import psycopg

        self.count += 1
        name = f"bench{self.count}"
        with psycopg.connect(self.server.conn_str, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.server.conn_str.replace("/xceprov?", f"/{name}?", 1)

    def close(self) -> None:
        self.server.close()


@contextlib.contextmanager
def backend_site(root: Path, backend: str, n: int, databases: Databases) -> Iterator[LoadedConfig]:
    """A simulated controller and a site on it with ``terraform.backend: backend``."""
    with simulated_controller(root / "ctl") as address, _conn_env(databases.fresh() if backend == "pg" else None):
        write_site(root / "site", root / "ctl", address, max_instances=max(n, 1))
        path = root / "site" / "xceprov.yaml"
        doc = json.loads(path.read_text())
        doc["terraform"] = {"backend": backend}
        path.write_text(json.dumps(doc, indent=1))
        yield load_config(str(path))


@contextlib.contextmanager
def _conn_env(conn_str: str | None) -> Iterator[None]:
    """``PG_CONN_STR`` set for the block (the way a site hands it to the daemon), then removed."""
    if conn_str is None:
        yield
        return
    os.environ["PG_CONN_STR"] = conn_str
    try:
        yield
    finally:
        os.environ.pop("PG_CONN_STR", None)


def timed_burst(root: Path, backend: str, n: int, databases: Databases) -> float:
    """Seconds of one burst of ``n`` through the executor; the store and the controller then agree."""
    with backend_site(root, backend, n, databases) as loaded, fenced_session(loaded, [PROVIDER], REPO) as session:
        session.executor.workdir(PROVIDER)  # build and init the working directory now: not timed
        op_id = new_op_id()
        began = time.perf_counter()
        session.executor.create(PROVIDER, TEMPLATE, n, op_id=op_id)
        seconds = time.perf_counter() - began
        check_burst(session.parts, loaded.config.sim_state_dir() / "cloud.sqlite", op_id, n)
        check_backend(loaded, backend)
    return seconds


def check_backend(loaded: LoadedConfig, backend: str) -> None:
    """The states are where the backend says: local files with ``local``, none with ``pg``."""
    work = loaded.config.state_dir / "work"
    # .terraform/terraform.tfstate is Terraform's record of the backend, not a state.
    local = [p for p in work.rglob(LOCAL_STATE) if p.parent.name != ".terraform" and p.stat().st_size > 0]
    if bool(local) != (backend == "local"):
        raise SystemExit(f"bench_scaleout: backend {backend}, but local Terraform states were written: {local}")


def timed_scan_of(root: Path, backend: str, n: int, ops: int, databases: Databases) -> float:
    """Seconds of one acting orphan scan over ``n`` instances of ``ops`` ops (built, not timed)."""
    with backend_site(root, backend, n, databases) as loaded, fenced_session(loaded, [PROVIDER], REPO) as wired:
        build(wired.parts, n, ops)
        facts = wired.parts.facts
        assert isinstance(facts, LinkFacts)
        config = loaded.config
        scanner = OrphanScanner(config, wired, LinkController(facts.link), time.time, config.state_dir)
        seconds = timed_scan(scanner, n)
        check_backend(loaded, backend)
        return seconds


def best_of(rounds: int, measure: Callable[[str, int], float]) -> tuple[dict[str, float], list[str]]:
    """Best seconds per backend over ``rounds``, alternating which goes first."""
    best: dict[str, float] = {}
    loads = [load()]
    for r in range(max(1, rounds)):
        for backend in BACKENDS if r % 2 == 0 else tuple(reversed(BACKENDS)):
            seconds = measure(backend, r)
            best[backend] = min(seconds, best.get(backend, math.inf))
            loads.append(load())
            print(f"  round {r + 1}: {backend}: {seconds:.1f} s (load {loads[-1]})", file=sys.stderr)
    return best, loads


def run(parts: list[str], burst: int, scan: int, ops: int, rounds: int) -> dict[str, Any]:
    """Every part asked for; per part the best seconds per backend, the ratio and the verdict."""
    out: dict[str, Any] = {}
    databases = Databases()
    try:
        with tempfile.TemporaryDirectory(prefix="xce-bench-scaleout-") as tmp:
            root = Path(tmp)
            setup_raw_tool(root)
            if "burst" in parts:
                best, loads = best_of(rounds, lambda b, r: timed_burst(root / f"burst-{b}-{r}", b, burst, databases))
                out["burst"] = _ratio(best, TARGET_BURST, {"instances": burst, "loads": loads})
            if "scan" in parts:
                best, loads = best_of(
                    rounds, lambda b, r: timed_scan_of(root / f"scan-{b}-{r}", b, scan, ops, databases)
                )
                out["scan"] = _ratio(best, TARGET_SCAN, {"instances": scan, "ops": ops, "loads": loads})
            if "takeover" in parts:
                out["takeover"] = takeover(root / "takeover")
    finally:
        databases.close()
    return out


def _ratio(best: dict[str, float], target: float, extra: dict[str, Any]) -> dict[str, Any]:
    ratio = best["pg"] / best["local"]
    return {**extra, "best": best, "ratio": ratio, "target": target, "pass": ratio <= target}


def takeover(root: Path) -> dict[str, Any]:
    """Kill → the survivor's first mutation of a dead daemon's provider, against TTL + grace + interval.

    Two daemons split the four providers (``tests/scaleout_world.py``: the simulated controller
    and cloud of ``xceprov sim up``, a PostgreSQL of its own), each provider with room for 3; a
    demand for all 12 arrives, and daemon a is killed (SIGKILL, its whole process tree) as soon
    as its first apply has started. The survivor resumes a's open op once it holds a's leases:
    its first mutation of one of a's providers is found in the cloud's mutation journal (its
    time, by the epoch of the run). No controller failover happens, so the grace is 0.
    """
    from scaleout_world import PROVIDERS, Member, Scaleout, scaleout_world

    from orchestrator.sim.controller import admin

    def started(w: Scaleout, name: str) -> Member:
        member = w.member(name)
        cfg = yaml.safe_load(member.config.read_text())
        for provider in cfg["providers"].values():
            provider["max_instances"] = 3
        member.config.write_text(yaml.safe_dump(cfg))
        return member.start("-vv")  # the debug log times each Terraform run (printed below)

    with scaleout_world(root) as w:
        a = started(w, "a")
        # Generous waits: on a loaded machine a first pass that initialises four providers is slow.
        w.wait_for("daemon a holding every provider", lambda: set(a.held()) == set(PROVIDERS), 600)
        b = started(w, "b")
        w.wait_split(a, b, timeout=600)
        ttl = max(float(row.get("ttl") or 0.0) for row in b.status()["leases"])
        interval = float(b.status()["daemon"]["reconcile_interval"])
        dead = a.held()

        def scanned(m: Member) -> bool:  # its start's orphan scan (a read of every provider) over
            return bool((m.status().get("orphans") or {}).get("last_scan"))

        # In the steady state: a plan of the start's scan in a dead provider's directory is no
        # read under the new lease, and a scan in flight would hold the survivor's loop.
        w.wait_for("both daemons past their first orphan scan", lambda: scanned(a) and scanned(b), 600)
        admin.submit(w.world.sim, "cpu", 3 * len(PROVIDERS), 900.0)
        w.wait_for("daemon a applying", lambda: "op-apply" in (a.state / "audit.log").read_text(errors="replace"), 600)
        killed = time.time()
        a.kill9()

        def first_call() -> float | None:
            for m in w.world.store.mutations():
                if m.provider in dead and m.epoch not in ("", *dead.values()):
                    return m.at
            return None

        w.wait_for("the survivor's first call on a dead daemon's provider", lambda: first_call() is not None, 300)
        seconds = float(first_call() or 0.0) - killed
        bound = ttl + 0.0 + interval
        lines = timeline(b.log(), killed)
        read = first_read(lines, dead)
        # Where the time went: the survivor's own account of it, in seconds after the kill.
        print(f"  killed at {time.strftime('%H:%M:%S', time.gmtime(killed))}; load {load()}; the survivor's log:")
        for at, line in lines:
            if "filelock" not in line:
                print(f"    +{at:5.1f}s {line[:220]}")
    return {
        "measured": True,
        "seconds": seconds,
        "read_seconds": read,
        "ttl": ttl,
        "grace": 0.0,
        "interval": interval,
        "pass": seconds <= bound,
        "read_pass": read is not None and read <= bound,
        "load": load(),
    }


TERRAFORM_RUN = re.compile(r"terraform \S+ (\w+) in (\S+): exit \d+ after ([\d.]+) s")


def first_read(lines: list[tuple[float, str]], providers: Iterable[str]) -> float | None:
    """Seconds to the end of the survivor's first ``plan`` (its refresh reads the cloud) in a
    working directory of ``providers`` (shard 0 is named after the provider, the others start so)."""
    names = tuple(providers)
    for at, line in lines:
        run = TERRAFORM_RUN.search(line)
        if run and run[1] == "plan" and Path(run[2]).name.startswith(names):
            return at
    return None


def timeline(log: str, since: float) -> list[tuple[float, str]]:
    """The lines of a daemon's text log written after ``since`` (unix seconds), with their offset."""
    out: list[tuple[float, str]] = []
    for line in log.splitlines():
        try:
            at = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000.0
        except ValueError:
            continue
        if at >= since:
            out.append((at - since, line[24:]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure, print the figures and a JSON line; the exit code for ``--check``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--scan", type=int, default=1000)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="measurements per path (best counts)")
    parser.add_argument("--parts", default="burst,scan,takeover", help="comma-separated: burst, scan, takeover")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - {"burst", "scan", "takeover"})
    if unknown:
        parser.error(f"--parts: unknown part {', '.join(unknown)}")
    if not 0 < args.ops <= args.scan:
        parser.error("--ops must be at least 1 and at most --scan")
    from pg_server import skip_reason

    reason = skip_reason()
    if reason is not None:  # as the tests are skipped: the benchmark needs a server to measure
        print(f"bench_scaleout: skipped: {reason}")
        return 0
    measured = run(parts, args.burst, args.scan, args.ops, args.rounds)
    missed = False
    for name, label in (("burst", f"burst of {args.burst}"), ("scan", f"orphan scan over {args.scan}")):
        if name not in measured:
            continue
        m = measured[name]
        print(f"{label}: pg {m['best']['pg']:.1f} s, local {m['best']['local']:.1f} s")
        verdict = "PASS" if m["pass"] else "MISS"
        print(f"  pg / local = {m['ratio']:.2f} (target <= {m['target']}) {verdict};  load: {' '.join(m['loads'])}")
        missed |= not m["pass"]
    if "takeover" in measured:
        t = measured["takeover"]
        if not t.get("measured"):
            print(f"takeover: not measured: {t['reason']}")
        else:
            verdict = "PASS" if t["pass"] else "MISS"
            target = f"target <= TTL {t['ttl']:g} + grace {t['grace']:g} + interval {t['interval']:g} s"
            read = t["read_seconds"]
            if read is None:
                print("takeover: the survivor's first cloud read not found in its log")
            else:
                reading = "PASS" if t["read_pass"] else "MISS"
                print(f"takeover: {read:.1f} s from the kill to the survivor's first cloud read ({target}) {reading}")
            print(f"takeover: {t['seconds']:.1f} s from the kill to its first mutation ({target}) {verdict}")
            print(f"  load: {t['load']}")
            missed |= not t["pass"]
    print(json.dumps(measured))
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
