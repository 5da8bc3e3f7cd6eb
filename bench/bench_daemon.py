"""Benchmark: the daemon against a simulated world (issue 10): push latency, idle CPU, lease
renewal lateness during a burst, the CPU of a pass with nothing to do.

Run: ``.venv/bin/python bench/bench_daemon.py [--only push,idle,burst,pass] [--rounds 5]
[--idle-seconds 60] [--burst 500] [--live 1000] [--passes 10] [--check]``.

The world is the product's own (``xceprov sim up --only controller``: the simulated controller
and cloud behind real Terraform, on a free loopback port, in a temporary directory); provider
``sim`` only (``max_instances`` 1000), template ``cpu``. The daemon is the real
:class:`~orchestrator.daemon.service.Daemon` that ``xceprov daemon`` runs, **in this process**
(its lease keeper is its child process, as in production), so that the bench can timestamp the
boundaries of the push path without changing what the daemon logs: the audit log and the log
have second precision at best. It is built as the command line builds it, except that no
bootstrap play is given (this world has no hosts to bootstrap: the hosts stay ``expected``
within their join deadline, which is what a pass sees of a burst before the hosts join).

Sub-benchmarks, in this order (``--only`` selects; ``pass`` without ``burst`` makes its hosts
itself):

- ``push``: with the lease held and nothing wanted, ``--rounds`` times: an admin submit of one
  host (``orchestrator.sim.controller.admin.submit``, what ``xceprov sim submit`` sends) at t0;
  the first create call is the moment the instance appears in the cloud's store (polled every
  5 ms from here, so at most ~5 ms late). The split: push received (the daemon's demand
  callback), pass start (``run_once``), intent committed (the ``commitFacts`` carrying the
  ``requestIntent``), Terraform init (when one runs), apply start, create seen. Target: max <= 2 s.
- ``idle``: the lease held, no demand: utime+stime (``/proc/<pid>/stat``) of this process (the
  daemon; the bench's main thread sleeps) and of every process below it (the lease keeper, a
  Terraform worker if one is left) over ``--idle-seconds``. Target: <= 1 % of a core.
- ``burst``: demand ``--burst`` hosts; while the daemon creates them, the lateness of every
  lease renewal against its schedule (the keeper's shared record: due, sent, confirmed times on
  the keeper's clock, as ``bench_lease.py`` reads them). Target: p99 of the sent lateness <=
  10 % of the renewal interval (TTL / 3).
- ``pass``: ``--live`` live hosts (created by the daemon: demand for the missing ones), then
  ``--passes`` passes with nothing to do, each woken by the bench: process CPU time (all
  threads) and the pass thread's own CPU time around ``run_once``, and the whole pass (with
  the status file and metrics after it). Recorded (no target: it bounds how often the loop can
  run).
- ``joins`` (root; never part of the default run, ``--only joins`` runs it alone, in a world of
  its own): a world *with* simulated hosts (a test lab, ``tests/sim_labs.py``) and a real
  ``xceprov daemon`` process with the bootstrap play, as a site runs it (default ``ansible``
  settings). Demand for ``--join-hosts`` hosts (100) at once; when every host has joined, per
  host the time from its ``instanceCreated`` fact (committed at the controller) to its worker's
  join (the controller's ``joined_at``), both on the simulated controller's clock: median, p95
  and max (issue 20; docs/performance.md, "Through the daemon: instanceCreated → join"). Run:
  ``.venv/bin/python bench/bench_daemon.py --only joins [--join-hosts 100] [--join-timeout 3600]``.

There is no raw tool for any of these, so the figures are seconds, printed with the load
average. With ``--check`` the exit code is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sim_world_helpers import SimWorld, process_tree, sim_world, wait_until  # type: ignore[import-not-found]

from bench.bench_lease import RenewalWatch, percentile
from orchestrator.configfile import load_config
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.logs import configure_logging
from orchestrator.daemon.service import Daemon, DaemonOptions, LoopParts, Reconciling, default_reconciler
from orchestrator.model.facts import Fact, FactKind
from orchestrator.paths import toolkit_root
from orchestrator.sim.controller import admin
from orchestrator.workspace.terraform import engine_for

PUSH_TARGET = 2.0
IDLE_TARGET = 0.01
LATENESS_TARGET = 0.10
SUBS = ("push", "idle", "burst", "pass")
# Sub-benchmarks that run alone, in a world of their own (``--only`` names them explicitly).
ALONE = ("joins",)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def load() -> str:
    """The 1-minute load average, printed with every figure."""
    return f"{os.getloadavg()[0]:.1f}"


class Marks:
    """Named monotonic timestamps from the daemon's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marks: list[tuple[str, float]] = []

    def note(self, name: str) -> None:
        with self.lock:
            self.marks.append((name, time.monotonic()))

    def first_after(self, t0: float) -> dict[str, float]:
        """The first of each name at or after ``t0``, relative to it."""
        found: dict[str, float] = {}
        with self.lock:
            for name, at in self.marks:
                if at >= t0 and name not in found:
                    found[name] = at - t0
        return found

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _ in self.marks if n == name)


class TimedEngine:
    """The configured engine, noting when ``init`` and ``apply`` start."""

    def __init__(self, inner: Any, marks: Marks) -> None:
        self._inner, self._marks = inner, marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def init(self, *args: Any, **kwargs: Any) -> Any:
        self._marks.note("terraform init")
        return self._inner.init(*args, **kwargs)

    def plan(self, *args: Any, **kwargs: Any) -> Any:
        # A refresh-only plan is the executor's host-loss check before an apply (ops/losses.py).
        self._marks.note("loss-check start" if kwargs.get("refresh_only") else "plan start")
        try:
            return self._inner.plan(*args, **kwargs)
        finally:
            self._marks.note("loss-check end" if kwargs.get("refresh_only") else "plan end")

    def show_plan(self, *args: Any, **kwargs: Any) -> Any:
        self._marks.note("show-plan start")
        return self._inner.show_plan(*args, **kwargs)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        self._marks.note("apply start")
        return self._inner.apply(*args, **kwargs)


class TimedReconciler:
    """The daemon's reconciler, noting each pass and its CPU time."""

    def __init__(self, inner: Reconciling, marks: Marks) -> None:
        self.inner, self.marks = inner, marks
        self.cpu: list[tuple[float, float, float]] = []  # process CPU, thread CPU, wall

    def run_once(self, trigger: str = "interval") -> Any:
        self.marks.note("pass start")
        cpu, thread, wall = time.process_time(), time.thread_time(), time.monotonic()
        try:
            return self.inner.run_once(trigger)
        finally:
            self.cpu.append((time.process_time() - cpu, time.thread_time() - thread, time.monotonic() - wall))
            self.marks.note("pass end")

    def reload(self, config: Any) -> None:
        self.inner.reload(config)


class BenchDaemon(Daemon):
    """The daemon with the bench's timestamps at its boundaries (nothing else changed)."""

    def __init__(self, lifecycle: Lifecycle, options: DaemonOptions, marks: Marks) -> None:
        super().__init__(lifecycle, options)
        self.marks = marks
        self.whole: list[float] = []

    def on_demand(self, snapshot: Any) -> None:
        self.marks.note("push received")
        super().on_demand(snapshot)

    def start(self) -> None:
        super().start()
        assert self.link is not None
        one, many = self.link.commit_fact, self.link.commit_facts

        def commit_fact(fact: Fact) -> int:
            done = one(fact)
            if fact.kind == FactKind.REQUEST_INTENT:
                self.marks.note("intent committed")
            return done

        def commit_facts(facts: Sequence[Fact]) -> list[int]:
            done = many(facts)
            if any(f.kind == FactKind.REQUEST_INTENT for f in facts):
                self.marks.note("intent committed")
            return done

        self.link.commit_fact = commit_fact  # type: ignore[method-assign]
        self.link.commit_facts = commit_facts  # type: ignore[method-assign]

    def run_pass(self, trigger: str) -> bool:
        cpu = time.process_time()
        try:
            return super().run_pass(trigger)
        finally:
            self.whole.append(time.process_time() - cpu)

    def wake_pass(self) -> None:
        """Ask for a pass now (as a host event would)."""
        self.wake("interval")


def configure(world: SimWorld, interval: float) -> None:
    """Provider ``sim`` only (1000 hosts), no retries or deadlines during the bench."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["providers"].pop("spot", None)
    for template in cfg["templates"].values():
        template["providers"].pop("spot", None)
    cfg["providers"]["sim"].update({"max_instances": 1000, "join_deadline": "60m", "hold_time": "60m"})
    cfg["daemon"] = {"reconcile_interval": f"{interval:g}s", "stop_timeout": "30s"}
    cfg["policy"] = {"cooldown": "1s", "retry": {"base": "600s", "max": "600s"}}
    path.write_text(yaml.safe_dump(cfg))


class Cloud:
    """The store's live instance count, read with plain SQLite (cheap enough to poll)."""

    def __init__(self, world: SimWorld) -> None:
        world.store.close()  # made (with its schema) by the first CloudStore
        self.conn = sqlite3.connect(f"file:{world.sim / 'cloud.sqlite'}?mode=ro", uri=True, check_same_thread=False)
        self.cluster = world.cluster

    def count(self) -> int:
        row = self.conn.execute(
            "SELECT COUNT(*) FROM instances i JOIN tags t ON t.instance_id = i.id "
            "WHERE i.state != 'terminated' AND t.key = 'xce:cluster' AND t.value = ?",
            (self.cluster,),
        ).fetchone()
        return int(row[0])


@contextlib.contextmanager
def daemon_in(world: SimWorld, marks: Marks) -> Iterator[tuple[BenchDaemon, TimedReconciler]]:
    """The daemon running in a thread of this process; stopped (leases released) at the end."""
    path = world.site / "xceprov.yaml"
    os.environ["XCEPROV_CONFIG"] = str(path)
    loaded = load_config(path)
    # As ``xceprov daemon`` logs (text, INFO, to stderr): its cost is part of the daemon's.
    configure_logging("text", logging.INFO)
    lifecycle = Lifecycle(loaded, lambda: load_config(path))
    timed: list[TimedReconciler] = []

    def reconciler(parts: LoopParts) -> Reconciling:
        timed.append(TimedReconciler(default_reconciler(parts), marks))
        return timed[0]

    options = DaemonOptions(toolkit_root(), engine=TimedEngine(engine_for(loaded.config), marks), reconciler=reconciler)
    daemon = BenchDaemon(lifecycle, options, marks)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(daemon.run()), name="daemon-loop", daemon=True)
    runner.start()
    try:
        wait_until("the daemon's first pass", lambda: marks.count("pass end") >= 1, timeout=120)
        assert daemon.keeper is not None
        keeper = daemon.keeper
        wait_until("the lease of sim", lambda: keeper.valid("sim"), timeout=60)
        yield daemon, timed[0]
    finally:
        lifecycle.request_stop("bench done")
        runner.join(60)
    if codes != [0]:
        raise SystemExit(f"the daemon did not stop cleanly: {codes}")


def quiet(daemon: BenchDaemon, marks: Marks, cloud: Cloud, want: int, timeout: float) -> None:
    """Until the cloud holds ``want`` instances and a pass started after that has ended."""
    wait_until(f"{want} instances in the cloud", lambda: cloud.count() >= want, timeout=timeout, every=0.2)
    started = marks.count("pass start")
    daemon.wake_pass()
    wait_until("a pass after them", lambda: marks.count("pass end") > started, timeout=timeout, every=0.1)


def submit(world: SimWorld, hosts: int) -> None:
    admin.submit(world.sim, "cpu", hosts, 3600.0)  # raises when refused


SPLIT = (
    "push received",
    "pass start",
    "intent committed",
    "terraform init",
    "loss-check start",
    "show-plan start",
    "loss-check end",
    "plan start",
    "plan end",
    "apply start",
    "create seen",
)


def bench_push(world: SimWorld, daemon: BenchDaemon, marks: Marks, cloud: Cloud, rounds: int) -> dict[str, Any]:
    rows: list[dict[str, float]] = []
    for _ in range(rounds):
        before = cloud.count()
        time.sleep(1.5)  # past the cooldown of the previous op: the push alone decides
        t0 = time.monotonic()
        submit(world, 1)
        seen = 0.0
        deadline = t0 + 60
        while cloud.count() <= before:
            if time.monotonic() > deadline:
                raise SystemExit("no create within 60 s of the push")
            time.sleep(0.005)
        seen = time.monotonic() - t0
        row = {**marks.first_after(t0), "create seen": seen}
        rows.append(row)
        print(
            f"push {len(rows)}: create seen {seen:.3f} s  ("
            + ", ".join(f"{k} {row[k]:.3f}" for k in SPLIT[:-1] if k in row)
            + f")  load {load()}",
            flush=True,
        )
        quiet(daemon, marks, cloud, before + 1, 120)
    latencies = [r["create seen"] for r in rows]
    split = {k: round(statistics.median(r[k] for r in rows if k in r), 3) for k in SPLIT if any(k in r for r in rows)}
    return {
        "median_s": round(statistics.median(latencies), 3),
        "max_s": round(max(latencies), 3),
        "split_median_s": split,
        "rounds": [{k: round(v, 3) for k, v in r.items()} for r in rows],
    }


def cpu_ticks(pids: Sequence[int]) -> dict[int, int]:
    """utime + stime of each process still there, in clock ticks."""
    out: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])
    return out


def bench_idle(seconds: float) -> dict[str, Any]:
    pids = process_tree(os.getpid())
    before = cpu_ticks(pids)
    time.sleep(seconds)
    after = cpu_ticks(pids)
    used = sum(after[p] - before[p] for p in after if p in before) / CLK_TCK
    share = used / seconds
    print(
        f"idle: {used:.2f} s CPU over {seconds:g} s = {100 * share:.2f} % of a core"
        f" ({len(pids)} processes)  load {load()}"
    )
    return {"cpu_s": round(used, 3), "seconds": seconds, "share_pct": round(100 * share, 3), "processes": len(pids)}


def bench_burst(world: SimWorld, daemon: BenchDaemon, marks: Marks, cloud: Cloud, hosts: int) -> dict[str, Any]:
    assert daemon.keeper is not None
    keeper = daemon.keeper
    interval = keeper.record("sim").ttl / 3
    watch = RenewalWatch(lambda: keeper.record("sim"))
    try:
        before = cloud.count()
        t0 = time.monotonic()
        submit(world, hosts)
        quiet(daemon, marks, cloud, before + hosts, 900)
        took = time.monotonic() - t0
        sent, granted = watch.take()
    finally:
        watch.close()
    row: dict[str, Any] = {"hosts": hosts, "burst_s": round(took, 1), "renewals": len(sent), "interval_s": interval}
    for label, values in (("sent", sent), ("granted", granted)):
        p99 = percentile(values, 99)
        row[f"{label}_p50_ms"] = round(percentile(values, 50) * 1000, 2)
        row[f"{label}_p99_ms"] = round(p99 * 1000, 2)
        row[f"{label}_p99_pct"] = round(100 * p99 / interval, 2)
    print(
        f"burst {hosts}: {took:.1f} s, {len(sent)} renewals every {interval:.2f} s: sent p99 {row['sent_p99_ms']} ms"
        f" ({row['sent_p99_pct']} %), granted p99 {row['granted_p99_ms']} ms ({row['granted_p99_pct']} %)"
        f"  load {load()}",
        flush=True,
    )
    return row


def bench_pass(
    world: SimWorld, daemon: BenchDaemon, timed: TimedReconciler, marks: Marks, cloud: Cloud, live: int, passes: int
) -> dict[str, Any]:
    missing = live - cloud.count()
    if missing > 0:
        print(f"pass: creating {missing} more hosts for {live} live", flush=True)
        submit(world, missing)
        quiet(daemon, marks, cloud, live, 1800)
    first = len(timed.cpu)
    for _ in range(passes):
        ended = marks.count("pass end")
        daemon.wake_pass()
        wait_until("the woken pass", lambda ended=ended: marks.count("pass end") > ended, timeout=120, every=0.05)
        time.sleep(0.3)  # the status file after it (counted in the whole pass)
    rows = timed.cpu[first:]
    whole = daemon.whole[-passes:]
    reads = read_costs(daemon)
    result = {
        "live": cloud.count(),
        "passes": len(rows),
        "process_cpu_ms_median": round(1000 * statistics.median(r[0] for r in rows), 1),
        "process_cpu_ms_max": round(1000 * max(r[0] for r in rows), 1),
        "thread_cpu_ms_median": round(1000 * statistics.median(r[1] for r in rows), 1),
        "wall_ms_median": round(1000 * statistics.median(r[2] for r in rows), 1),
        "whole_pass_cpu_ms_median": round(1000 * statistics.median(whole), 1),
        **reads,
    }
    print(
        f"pass over {result['live']} live: run_once process CPU median {result['process_cpu_ms_median']} ms"
        f" (max {result['process_cpu_ms_max']}), pass thread {result['thread_cpu_ms_median']} ms,"
        f" wall {result['wall_ms_median']} ms; with status file {result['whole_pass_cpu_ms_median']} ms;"
        f" one full read of every fact {reads['query_facts_cpu_ms']} ms ({reads['facts']} facts),"
        f" of every host {reads['host_status_cpu_ms']} ms"
        f"  load {load()}",
        flush=True,
    )
    return result


def read_costs(daemon: BenchDaemon, times: int = 5) -> dict[str, Any]:
    """Process CPU of two reads alone through the daemon's link, median of ``times``: a full
    ``queryFacts`` of the provider (what every pass and its status file made before facts were
    read from the last id seen; a full read is now made after a term change and every ten
    minutes) and ``hostStatus`` (every pass still makes it in full)."""
    assert daemon.link is not None
    link = daemon.link
    facts, hosts = [], []
    count = 0
    for _ in range(times):
        cpu = time.process_time()
        count = len(link.query_facts("sim"))
        facts.append(time.process_time() - cpu)
        cpu = time.process_time()
        link.host_status()
        hosts.append(time.process_time() - cpu)
    return {
        "facts": count,
        "query_facts_cpu_ms": round(1000 * statistics.median(facts), 1),
        "host_status_cpu_ms": round(1000 * statistics.median(hosts), 1),
    }


def configure_joins(world: SimWorld, hosts: int) -> None:
    """Provider ``sim`` for ``hosts`` hosts; default ``ansible`` settings (what a site runs),
    nothing returned or retried while the bench waits (long deadlines and backoff)."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["providers"]["sim"].update({"max_instances": hosts, "join_deadline": "120m", "hold_time": "120m"})
    cfg["daemon"] = {"reconcile_interval": "5s", "stop_timeout": "60s"}
    cfg["ansible"] = {"timeout": "3600s"}
    cfg["policy"] = {"cooldown": "1s", "retry": {"base": "3600s", "max": "3600s"}}
    path.write_text(yaml.safe_dump(cfg))


def created_to_joined(facts: Sequence[Fact], joined_at: dict[str, float]) -> dict[str, float]:
    """Per instance key: its worker's join minus its ``instanceCreated`` commit (controller clock)."""
    created = {f.instance_key: f.committed for f in facts if f.kind == FactKind.INSTANCE_CREATED}
    return {key: joined_at[key] - at for key, at in created.items() if joined_at.get(key, 0.0) > 0}


def bench_joins(hosts: int, timeout: float) -> dict[str, Any]:
    """A burst of ``hosts`` through a real ``xceprov daemon`` with simulated hosts (the module docstring)."""
    from sim_labs import claim_test_lab  # type: ignore[import-not-found]  # tests/ is on the path

    from orchestrator.sim.hosts import lab as labnet

    lab = claim_test_lab(f"bench-joins-{os.getpid()}")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-joins-") as tmp,
            sim_world(Path(tmp) / "site", f"bjn-{secrets.token_hex(3)}", lab) as world,
        ):
            configure_joins(world, hosts)
            return _joins(world, hosts, timeout)
    finally:
        labnet.destroy_lab(lab)


def _joins(world: SimWorld, hosts: int, timeout: float) -> dict[str, Any]:
    log_path = world.site / "daemon.log"
    with open(log_path, "wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "daemon"],
            cwd=world.site,
            env=world.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status = world.state / "daemon" / "status.json"

            def leased() -> bool:
                if daemon.poll() is not None:
                    raise SystemExit(f"the daemon exited:\n{log_path.read_text(errors='replace')[-4000:]}")
                doc = json.loads(status.read_text()) if status.exists() else {}
                return any(row.get("held") for row in doc.get("leases", []))

            wait_until("the daemon's lease of sim", leased, timeout=120, every=0.5)
            t0 = time.monotonic()
            submit(world, hosts)
            load_during: list[float] = []

            def all_joined() -> bool:
                if daemon.poll() is not None:
                    raise SystemExit(f"the daemon exited:\n{log_path.read_text(errors='replace')[-4000:]}")
                load_during.append(os.getloadavg()[0])
                joined = [h for h in world.hosts().values() if h.joined_at > 0]
                print(
                    f"joins: {len(joined)}/{hosts} joined after {time.monotonic() - t0:.0f} s  load {load()}",
                    flush=True,
                )
                return len(joined) >= hosts

            wait_until(f"{hosts} hosts joined", all_joined, timeout=timeout, every=15)
            took = time.monotonic() - t0
            facts = world.facts()
            joined_at = {k: h.joined_at for k, h in world.hosts().items()}
        finally:
            daemon.terminate()
            try:
                daemon.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, 9)
                daemon.wait()
    spans = sorted(created_to_joined(facts, joined_at).values())
    created = sorted(f.committed for f in facts if f.kind == FactKind.INSTANCE_CREATED)
    row = {
        "hosts": hosts,
        "measured": len(spans),
        "median_s": round(statistics.median(spans), 1),
        "p95_s": round(percentile(spans, 95), 1),
        "min_s": round(spans[0], 1),
        "max_s": round(spans[-1], 1),
        "created_spread_s": round(created[-1] - created[0], 1),
        "submit_to_all_joined_s": round(took, 1),
        "load_mean_during": round(statistics.mean(load_during), 2) if load_during else None,
        "forks": 20,
    }
    print(
        f"joins {hosts}: created -> joined median {row['median_s']} s, p95 {row['p95_s']} s"
        f" (min {row['min_s']}, max {row['max_s']}); instanceCreated spread over {row['created_spread_s']} s;"
        f" submit -> all joined {row['submit_to_all_joined_s']} s; mean load during {row['load_mean_during']}"
        f"  load {load()}",
        flush=True,
    )
    return row


def verdicts(results: dict[str, Any]) -> list[tuple[str, bool]]:
    """(line, met) for each target of the sub-benchmarks that ran."""
    out: list[tuple[str, bool]] = []
    if "push" in results:
        r = results["push"]
        out.append(
            (
                f"push -> create: max {r['max_s']} s (median {r['median_s']}) <= {PUSH_TARGET} s",
                r["max_s"] <= PUSH_TARGET,
            )
        )
    if "idle" in results:
        r = results["idle"]
        out.append(
            (f"idle: {r['share_pct']} % of a core <= {100 * IDLE_TARGET:g} %", r["share_pct"] <= 100 * IDLE_TARGET)
        )
    if "burst" in results:
        r = results["burst"]
        out.append(
            (
                f"renewal lateness in a burst of {r['hosts']}: p99 {r['sent_p99_pct']} % <= 10 %",
                r["sent_p99_pct"] <= 100 * LATENESS_TARGET,
            )
        )
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The selected sub-benchmarks on one world and one daemon (``joins`` in a world of its own)."""
    chosen = [s for s in SUBS if s in args.only]
    results: dict[str, Any] = {"load_start": load()}
    if "joins" in args.only:
        results["joins"] = bench_joins(args.join_hosts, args.join_timeout)
    if not chosen:
        results["load_end"] = load()
        return results
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-daemon-"))
        world = stack.enter_context(sim_world(Path(tmp) / "site", f"bdm-{secrets.token_hex(3)}"))
        configure(world, args.interval)
        marks = Marks()
        cloud = Cloud(world)
        stack.callback(cloud.conn.close)
        daemon, timed = stack.enter_context(daemon_in(world, marks))
        if "push" in chosen:
            results["push"] = bench_push(world, daemon, marks, cloud, args.rounds)
        if "idle" in chosen:
            time.sleep(2)  # the last pass's status file
            results["idle"] = bench_idle(args.idle_seconds)
        if "burst" in chosen:
            results["burst"] = bench_burst(world, daemon, marks, cloud, args.burst)
        if "pass" in chosen:
            results["pass"] = bench_pass(world, daemon, timed, marks, cloud, args.live, args.passes)
    results["load_end"] = load()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print each figure, the verdicts with ``--check``, and a JSON summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default=",".join(SUBS), help=f"comma-separated, of {', '.join(SUBS + ALONE)}")
    parser.add_argument("--rounds", type=int, default=5, help="pushes timed")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=500, help="hosts of the burst")
    parser.add_argument("--live", type=int, default=1000, help="live hosts for the no-op passes")
    parser.add_argument("--passes", type=int, default=10, help="no-op passes timed")
    parser.add_argument("--interval", type=float, default=60.0, help="daemon.reconcile_interval (s)")
    parser.add_argument("--join-hosts", type=int, default=100, help="hosts of the joins burst (root)")
    parser.add_argument("--join-timeout", type=float, default=3600.0, help="seconds to wait for every join")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(args.only) - set(SUBS) - set(ALONE))
    if unknown:
        parser.error(f"--only: unknown sub-benchmark {', '.join(unknown)} (of {', '.join(SUBS + ALONE)})")
    results = run(args)
    return report(results, verdicts(results), args.check)


def report(results: dict[str, Any], found: Sequence[tuple[str, bool]], check: bool) -> int:
    """Print each verdict and the JSON summary; the exit code (1 on a miss with ``check``)."""
    for line, met in found:
        print(f"{'PASS' if met else 'MISS'}: {line}")
    print(json.dumps(results))
    return 1 if check and not all(met for _, met in found) else 0


if __name__ == "__main__":
    sys.exit(main())
