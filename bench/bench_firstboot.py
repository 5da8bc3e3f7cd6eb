"""Benchmark: hosts that join by themselves (issue 30, "Benchmarks"): push against first boot, through the daemon.

Run (root: simulated hosts): ``.venv/bin/python bench/bench_firstboot.py [--hosts 20] [--scale 100]
[--skip-push-at-scale] [--pool 10] [--pool-template first-boot|push] [--check]``.

One world with simulated hosts (``xceprov sim up`` in a test lab of its own, ``tests/sim_labs.py``;
provider ``sim`` only), two templates of the same host: ``cpu`` (``bootstrap.mode: push``, the
default: the daemon's Ansible play configures each host over SSH) and ``fb`` (``bootstrap.mode:
first-boot``, ``image: bake:newest``: the host starts from a baked image and joins by itself).
First ``xceprov image bake fb --provider sim --from debian-12 --json`` (its time and the
builder's instance-minutes are recorded, as ``bench_bake.py`` measures them), then bursts, each
through a real ``xceprov daemon`` process of its own (default settings, as a site runs it), in
this order: ``--hosts`` pushed, ``--hosts`` first boot, with ``--scale`` the same at that size
(push skipped with ``--skip-push-at-scale``), and with ``--pool`` a warm pool of that many
instances of ``--pool-template`` started by a demand of as many hosts.

Per burst, from the daemon's first pass with its lease (the daemon's start is not counted):

- the demand is one piece of work of N hosts (``orchestrator.sim.controller.admin.submit``,
  what ``xceprov sim submit`` sends; it runs for a few seconds once all N joined, then the
  hosts are idle); ``submitted`` is the wall clock just before it;
- per host, submission → join (the controller's ``joined_at`` of the host, unix seconds on the
  same machine): p50, p95, max, and submission → all N joined;
- CPU seconds by cgroup (cgroup v1 ``cpuacct``, three groups made for the run): **control**,
  the daemon and everything it starts (its lease keeper, Terraform and the provider plugin,
  ``ansible-playbook``, its workers and their ssh clients: the daemon starts in the group, its
  children inherit it); **hosts**, the simulated hosts' own work (the host manager is moved to
  its group before the first host, and each host's namespace, boot, sshd and every session
  under it, cloud-init and the node manager are its descendants); **controller**, the simulated
  XCE controller (not the provisioner's: recorded beside). Control CPU is read twice: when the
  last host joined, and once the daemon is settled (no process left below it but the resting
  ones, two checks a second apart: the push play's tail after the join counted); per joined
  host is the settled figure over the hosts joined;
- the share of the machine's cores the hosts used from submission to the last join
  (``hosts CPU / (cores × seconds)``), and the share the whole machine was busy (``/proc/stat``:
  other work on the machine shares the cores too), with the load average.

After each burst the daemon is stopped (SIGTERM: leases released) and the burst's ops are
destroyed (``xceprov destroy --op ... --force``), so the next burst starts from an empty cloud.

Ratios, against the push path of the same run (issue 30's targets; ``--check``: exit 1 when one
is missed): first boot / push control CPU per joined host at ``--hosts`` <= 0.25; submission
→ all joined <= 0.4; first boot's control CPU per joined host at ``--scale`` / at ``--hosts``
<= 1.1; submission → joined p50 <= 30 s and p95 <= 60 s at ``--scale``; warm pool p95 <= 10 s.
The JSON summary is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sim_world_helpers import can_run_hosts  # type: ignore[import-not-found]

from bench.bench_bake import one_bake
from bench.bench_daemon import report
from bench.bench_lease import percentile
from bench.bootstrap_profile import CPUACCT, remove_group

CPU_RATIO_TARGET = 0.25
TIME_RATIO_TARGET = 0.4
FLAT_TARGET = 1.1
P50_TARGET = 30.0
P95_TARGET = 60.0
POOL_P95_TARGET = 10.0
WORK_SECONDS = 3.0  # the burst's work, once every host joined: then the hosts are idle
CLK_TCK = os.sysconf("SC_CLK_TCK")
PUSH, FIRST_BOOT = "push", "first-boot"
TEMPLATES = {PUSH: "cpu", FIRST_BOOT: "fb"}


def load() -> str:
    """The 1-minute load average, printed with every figure."""
    return f"{os.getloadavg()[0]:.1f}"


# -- the pure parts: one burst's row, the ratios, the verdicts ------------------------------------


@dataclass(frozen=True)
class Cpu:
    """CPU seconds of each side at one moment (cumulative), and the machine's busy core-seconds."""

    control: float
    hosts: float
    controller: float
    machine: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(
            self.control - other.control,
            self.hosts - other.hosts,
            self.controller - other.controller,
            self.machine - other.machine,
        )


def burst_row(
    label: str,
    mode: str,
    hosts: int,
    submitted: float,
    joined_at: Sequence[float],
    all_joined_s: float,
    at_joined: Cpu,
    settled: Cpu,
    cores: int,
) -> dict[str, Any]:
    """One burst's figures: ``joined_at`` (unix seconds) against ``submitted``; ``at_joined`` and
    ``settled`` are the CPU used from submission to the last join and to the daemon settled."""
    spans = sorted(max(0.0, at - submitted) for at in joined_at)
    joined = len(spans)
    core_seconds = cores * all_joined_s if all_joined_s > 0 else float("nan")
    return {
        "label": label,
        "mode": mode,
        "hosts": hosts,
        "joined": joined,
        "submit_to_all_joined_s": round(all_joined_s, 1),
        "join_p50_s": round(percentile(spans, 50), 1),
        "join_p95_s": round(percentile(spans, 95), 1),
        "join_max_s": round(spans[-1], 1) if spans else float("nan"),
        "control_cpu_s": round(settled.control, 2),
        "control_cpu_to_joined_s": round(at_joined.control, 2),
        "control_cpu_per_host_s": round(settled.control / joined, 3) if joined else float("nan"),
        "hosts_cpu_s": round(at_joined.hosts, 2),
        "hosts_core_share": round(at_joined.hosts / core_seconds, 3),
        "machine_core_share": round(at_joined.machine / core_seconds, 3),
        "controller_cpu_s": round(at_joined.controller, 2),
        "cores": cores,
    }


def _ratio(top: float, bottom: float) -> float:
    return round(top / bottom, 3) if bottom > 0 else float("nan")


def ratios(bursts: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The ratios against the push path (and the first boot at the small size) of the same run.

    ``bursts`` by label: ``push-N`` and ``first-boot-N`` for each size measured.
    """
    out: dict[str, float] = {}
    sizes = sorted({int(label.rsplit("-", 1)[1]) for label in bursts if label.startswith((PUSH, FIRST_BOOT))})
    for n in sizes:
        push, fb = bursts.get(f"{PUSH}-{n}"), bursts.get(f"{FIRST_BOOT}-{n}")
        if push and fb:
            out[f"cpu_per_host_fb_over_push_{n}"] = _ratio(fb["control_cpu_per_host_s"], push["control_cpu_per_host_s"])
            out[f"all_joined_fb_over_push_{n}"] = _ratio(fb["submit_to_all_joined_s"], push["submit_to_all_joined_s"])
    if len(sizes) >= 2:
        small, big = bursts.get(f"{FIRST_BOOT}-{sizes[0]}"), bursts.get(f"{FIRST_BOOT}-{sizes[-1]}")
        if small and big:
            out[f"cpu_per_host_fb_{sizes[-1]}_over_{sizes[0]}"] = _ratio(
                big["control_cpu_per_host_s"], small["control_cpu_per_host_s"]
            )
        small, big = bursts.get(f"{PUSH}-{sizes[0]}"), bursts.get(f"{PUSH}-{sizes[-1]}")
        if small and big:
            out[f"cpu_per_host_push_{sizes[-1]}_over_{sizes[0]}"] = _ratio(
                big["control_cpu_per_host_s"], small["control_cpu_per_host_s"]
            )
    return out


def verdicts(results: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(line, met) for each of issue 30's targets that the run measured."""
    bursts: Mapping[str, Mapping[str, Any]] = results.get("bursts", {})
    found: Mapping[str, float] = results.get("ratios", {})
    small, big = results.get("hosts"), results.get("scale")
    out: list[tuple[str, bool]] = []

    def judge(line: str, value: float, target: float) -> None:
        out.append((f"{line}: {value:g} <= {target:g}", value <= target))  # NaN is a miss

    if f"cpu_per_host_fb_over_push_{small}" in found:
        judge(
            f"control CPU per joined host, first boot / push, {small} hosts",
            found[f"cpu_per_host_fb_over_push_{small}"],
            CPU_RATIO_TARGET,
        )
        judge(
            f"submission -> all {small} joined, first boot / push",
            found[f"all_joined_fb_over_push_{small}"],
            TIME_RATIO_TARGET,
        )
    if big and f"cpu_per_host_fb_{big}_over_{small}" in found:
        judge(
            f"first boot's control CPU per joined host, {big} / {small}",
            found[f"cpu_per_host_fb_{big}_over_{small}"],
            FLAT_TARGET,
        )
    fb_big = bursts.get(f"{FIRST_BOOT}-{big}") if big else None
    if fb_big:
        share = f"(the hosts used {100 * fb_big['hosts_core_share']:.0f} % of the {fb_big['cores']} cores)"
        judge(f"first boot, {big} hosts: submission -> joined p50 (s) {share}", fb_big["join_p50_s"], P50_TARGET)
        judge(f"first boot, {big} hosts: submission -> joined p95 (s) {share}", fb_big["join_p95_s"], P95_TARGET)
    pool = bursts.get("pool")
    if pool:
        judge(
            f"warm pool ({pool['mode']}), {pool['hosts']} hosts: submission -> joined p95 (s)",
            pool["join_p95_s"],
            POOL_P95_TARGET,
        )
    return out


def burst_line(row: Mapping[str, Any]) -> str:
    """One burst's figures on one line."""
    return (
        f"{row['label']}: {row['joined']}/{row['hosts']} joined; submission -> joined p50 {row['join_p50_s']} s, "
        f"p95 {row['join_p95_s']} s, all {row['submit_to_all_joined_s']} s; control CPU {row['control_cpu_s']} s "
        f"({row['control_cpu_to_joined_s']} s to the last join) = {row['control_cpu_per_host_s']} s per joined host; "
        f"hosts {row['hosts_cpu_s']} s CPU = {100 * row['hosts_core_share']:.0f} % of {row['cores']} cores, "
        f"machine busy {100 * row['machine_core_share']:.0f} %; controller {row['controller_cpu_s']} s"
    )


# -- the world: CPU groups, the daemon, one burst ---------------------------------------------------


def machine_busy() -> float:
    """Busy core-seconds of the whole machine since boot (``/proc/stat``: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return children


class CpuGroups:
    """cpuacct groups of this run: ``control``, ``hosts``, ``controller`` (removed by :meth:`close`)."""

    NAMES = ("control", "hosts", "controller")

    def __init__(self) -> None:
        tag = f"xceprov-bench-fb-{os.getpid()}"
        self.groups = {name: CPUACCT / f"{tag}-{name}" for name in self.NAMES}
        for group in self.groups.values():
            group.mkdir()

    def adopt(self, name: str, pid: int) -> None:
        """Move ``pid`` and every process below it into group ``name`` (their children follow)."""
        children = _children()
        todo = [pid]
        while todo:
            current = todo.pop()
            with contextlib.suppress(OSError):
                (self.groups[name] / "cgroup.procs").write_text(str(current))
            todo.extend(children.get(current, []))

    def procs(self, name: str) -> int:
        """How many processes the group holds now."""
        return len((self.groups[name] / "cgroup.procs").read_text().split())

    def read(self) -> Cpu:
        """Each group's CPU seconds since it was made, and the machine's busy core-seconds."""
        used = {name: int((g / "cpuacct.usage").read_text()) / 1e9 for name, g in self.groups.items()}
        return Cpu(used["control"], used["hosts"], used["controller"], machine_busy())

    def close(self) -> None:
        """Everything back to the root group; the groups removed (leaving hosts take a moment)."""
        for group in self.groups.values():
            remove_group(group)


def configure(world: Any, max_instances: int) -> None:
    """Provider ``sim`` for the run; template ``fb``: ``cpu`` from its newest bake, joining at first
    boot; nothing returned or retried while the bench waits (long deadlines and backoff)."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["providers"]["sim"].update(
        {"max_instances": max_instances, "join_deadline": "60m", "hold_time": "60m", "idle_time": "60m"}
    )
    cfg["daemon"] = {"reconcile_interval": "5s", "stop_timeout": "60s"}
    cfg["ansible"] = {"timeout": "3600s"}
    cfg["policy"] = {"cooldown": "1s", "retry": {"base": "3600s", "max": "3600s"}}
    fb = json.loads(json.dumps(cfg["templates"]["cpu"]))
    fb["providers"]["sim"]["image"] = "bake:newest"
    fb["bootstrap"] = {**fb.get("bootstrap", {}), "mode": "first-boot"}
    cfg["templates"]["fb"] = fb
    cfg["templates"].pop("gpu", None)
    path.write_text(yaml.safe_dump(cfg))


def set_pool(world: Any, template: str, size: int) -> None:
    """``warm_pool: size`` (with a stopped cost) for ``template`` on ``sim``."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    side = cfg["templates"][template]["providers"]["sim"]
    side.update({"warm_pool": size, "stopped_cost_per_hour": 0.01})
    path.write_text(yaml.safe_dump(cfg))


def set_mode(world: Any, template: str, mode: str) -> None:
    """``bootstrap.mode: mode`` for ``template``."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["templates"][template]["bootstrap"]["mode"] = mode
    path.write_text(yaml.safe_dump(cfg))


def bake(world: Any) -> dict[str, Any]:
    """``xceprov image bake fb --from debian-12``; when the bake of the first-boot template fails,
    the failure is recorded and ``fb`` is baked as a push template (the same play in bake mode),
    then set back to first boot, so that the bursts still measure the first-boot join."""
    try:
        return one_bake(world, "fb", "--from", "debian-12")
    except AssertionError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        failed = next((line for line in lines if line.startswith("xceprov:")), lines[-1] if lines else "?")
        print(f"bake of the first-boot template fb FAILED: {failed}; baking it with bootstrap.mode push", flush=True)
    set_mode(world, "fb", PUSH)
    try:
        made = one_bake(world, "fb", "--from", "debian-12")
    finally:
        set_mode(world, "fb", FIRST_BOOT)
    made["workaround"] = f"baked with bootstrap.mode push: the first-boot template's bake failed: {failed}"
    return made


def pool_stopped(world: Any) -> int:
    """The cloud's instances of this cluster waiting stopped in a pool (plain SQLite, read only)."""
    conn = sqlite3.connect(f"file:{world.sim / 'cloud.sqlite'}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT COUNT(*) FROM instances i JOIN tags t ON t.instance_id = i.id JOIN tags c ON c.instance_id = i.id "
            "WHERE i.state = 'stopped' AND t.key = 'xce:pool' AND t.value = 'warm' "
            "AND c.key = 'xce:cluster' AND c.value = ?",
            (world.cluster,),
        ).fetchone()
    finally:
        conn.close()
    return int(row[0])


def status_doc(world: Any) -> dict[str, Any]:
    """The daemon's status file (``{}`` before the first)."""
    path = world.state / "daemon" / "status.json"
    with contextlib.suppress(OSError, ValueError):
        return dict(json.loads(path.read_text()))
    return {}


class Daemon:
    """A real ``xceprov daemon`` started inside the control group (its children inherit it)."""

    def __init__(self, world: Any, groups: CpuGroups) -> None:
        self.world, self.groups = world, groups
        self.log = world.site / f"daemon-{int(time.time())}.log"
        control = groups.groups["control"] / "cgroup.procs"
        # The shell joins the group, then becomes the daemon: nothing of it runs outside the group.
        argv = [
            "sh",
            "-c",
            'echo $$ > "$0" && exec "$@"',
            str(control),
            sys.executable,
            "-m",
            "orchestrator.cli",
            "daemon",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=world.site, env=world.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def tail(self) -> str:
        """The last lines of the daemon's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def alive(self) -> None:
        """Raise with the log's tail when the daemon has exited."""
        if self.proc.poll() is not None:
            raise SystemExit(f"the daemon exited {self.proc.returncode}:\n{self.tail()}")

    def leased(self) -> bool:
        self.alive()
        return any(row.get("held") for row in status_doc(self.world).get("leases", []))

    def stop(self) -> None:
        """SIGTERM (leases released), SIGKILL of its session after 90 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def settle(groups: CpuGroups, resting: int, timeout: float) -> None:
    """Until the control group holds no more than ``resting`` processes at two checks a second apart."""
    deadline = time.monotonic() + timeout
    calm = 0
    while calm < 2 and time.monotonic() < deadline:
        calm = calm + 1 if groups.procs("control") <= resting else 0
        time.sleep(1.0)


def wait_for(what: str, check: Any, timeout: float, every: float, on_timeout: Any) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}\n{on_timeout()}")
        time.sleep(every)


def why(world: Any, daemon: Daemon) -> str:
    """What the daemon says of the hosts not joined: the status file's bootstrap and first-boot
    members (each first boot that failed, with its step and message) and its log's tail."""
    doc = status_doc(world)
    keep = {k: doc.get(k) for k in ("instances", "bootstrap", "first_boot", "pools")}
    return f"status: {json.dumps(keep)[:6000]}\ndaemon log:\n{daemon.tail()}"


def one_burst(
    world: Any, groups: CpuGroups, label: str, mode: str, template: str, hosts: int, timeout: float, pool: int = 0
) -> dict[str, Any]:
    """``hosts`` of ``template`` through a daemon of their own (the module docstring); their ops destroyed after."""
    from orchestrator.model.facts import FactKind
    from orchestrator.sim.controller import admin

    # The ops that made instances (a pool's start op makes none: its instances are of the fill op).
    ops_before = {f.op_id for f in world.facts() if f.kind == FactKind.INSTANCE_CREATED}
    known = set(world.hosts())
    daemon = Daemon(world, groups)
    try:
        wait_for("the daemon's lease of sim", daemon.leased, 180, 0.5, daemon.tail)
        if pool:
            wait_for(
                f"{pool} instances stopped in the pool",
                lambda: pool_stopped(world) >= pool,
                900,
                1.0,
                lambda: why(world, daemon),
            )
        time.sleep(3)  # its pass after the lease (and the pool's fill) ends
        settle(groups, 2, 120)  # the daemon and its lease keeper
        resting = groups.procs("control")
        before = groups.read()
        submitted = time.time()
        t0 = time.monotonic()
        admin.submit(world.sim, template, hosts, WORK_SECONDS)
        joined: dict[str, float] = {}
        last = [0.0]

        def all_joined() -> bool:
            daemon.alive()
            for key, h in world.hosts().items():
                if key not in known and h.template == template and h.joined_at > 0:
                    joined[key] = h.joined_at
            if time.monotonic() - last[0] >= 15:
                last[0] = time.monotonic()
                print(
                    f"  {label}: {len(joined)}/{hosts} joined after {time.monotonic() - t0:.0f} s  load {load()}",
                    flush=True,
                )
            return len(joined) >= hosts

        wait_for(f"{hosts} hosts of {template} joined", all_joined, timeout, 0.5, lambda: why(world, daemon))
        all_joined_s = time.monotonic() - t0
        at_joined = groups.read() - before
        settle(groups, resting, 300)
        settled = groups.read() - before
    finally:
        daemon.stop()
    row = burst_row(
        label, mode, hosts, submitted, list(joined.values()), all_joined_s, at_joined, settled, os.cpu_count() or 1
    )
    row["load"] = load()
    print(burst_line(row) + f"  load {row['load']}", flush=True)
    ops = sorted({f.op_id for f in world.facts() if f.kind == FactKind.INSTANCE_CREATED} - ops_before)
    if ops:
        world.ok(
            "destroy",
            *(a for op in ops for a in ("--op", op)),
            "--provider",
            "sim",
            "--force",
            "--max",
            "1000",
            timeout=1800,
        )
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The bake, then every burst, in one world (the module docstring)."""
    from sim_labs import claim_test_lab  # type: ignore[import-not-found]
    from sim_world_helpers import sim_world  # type: ignore[import-not-found]

    from orchestrator.sim.hosts import lab as labnet

    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "hosts": args.hosts,
        "scale": args.scale,
        "bursts": {},
    }
    bursts: dict[str, Any] = results["bursts"]
    lab = claim_test_lab(f"bench-firstboot-{os.getpid()}")
    groups = CpuGroups()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-firstboot-") as tmp,
            sim_world(Path(tmp) / "site", f"bfb-{secrets.token_hex(3)}", lab) as world,
        ):
            groups.adopt("hosts", int((world.sim / "run" / "host-manager.pid").read_text().split()[0]))
            groups.adopt("controller", int((world.sim / "run" / "controller.pid").read_text().split()[0]))
            configure(world, max(args.hosts, args.scale or 0) + 2 * args.pool + 5)
            results["bake"] = bake(world)
            print(f"bake of fb: {results['bake']}  load {load()}", flush=True)
            sizes = [args.hosts] + ([args.scale] if args.scale else [])
            for n in sizes:
                for mode in (PUSH, FIRST_BOOT):
                    if mode == PUSH and n == args.scale and args.skip_push_at_scale:
                        continue
                    bursts[f"{mode}-{n}"] = one_burst(
                        world, groups, f"{mode}-{n}", mode, TEMPLATES[mode], n, args.timeout
                    )
            if args.pool:
                template = TEMPLATES[args.pool_template]
                set_pool(world, template, args.pool)
                bursts["pool"] = one_burst(
                    world,
                    groups,
                    f"pool-{args.pool_template}-{args.pool}",
                    args.pool_template,
                    template,
                    args.pool,
                    args.timeout,
                    pool=args.pool,
                )
    finally:
        groups.close()
        labnet.destroy_lab(lab)
    results["ratios"] = ratios({k: v for k, v in bursts.items() if k != "pool"})
    results["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print each ratio and verdict (``--check``: exit 1 on a miss) and a JSON summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20, help="hosts of the push / first-boot bursts (default 20)")
    parser.add_argument("--scale", type=int, default=0, help="also bursts of this many hosts (e.g. 100)")
    parser.add_argument("--skip-push-at-scale", action="store_true", help="no push burst at --scale")
    parser.add_argument("--pool", type=int, default=10, help="warm pool size and its burst (0: none)")
    parser.add_argument("--pool-template", choices=(FIRST_BOOT, PUSH), default=FIRST_BOOT, help="whose pool")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for a burst's joins")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.scale and args.scale <= args.hosts:
        parser.error(f"--scale: {args.scale} must be more than --hosts ({args.hosts})")
    if not can_run_hosts():
        print("bench_firstboot: simulated hosts need root and pycapnp", file=sys.stderr)
        return 2
    results = run(args)
    for name, value in results.get("ratios", {}).items():
        print(f"ratio {name}: {value}")
    return report(results, verdicts(results), args.check)


if __name__ == "__main__":
    sys.exit(main())
