"""Benchmark: what "pull at first boot" would cost — each simulated host applying the bootstrap to itself.

Run (root): ``.venv/bin/python bench/bench_pull_cost.py [--hosts 20] [--scale-hosts 100]
[--interpreter system|venv] [--strategy linear|mitogen_linear] [--check]``.

A measurement for issue 20's lever "pull mode", not a pull mode: the orchestrator is not involved.
For each size it starts that many fresh simulated hosts (``tests/loopback_hosts.py``), then, all at
once (hosts of a burst boot together), runs inside each host's namespaces (``nsenter`` into its
mount, UTS and PID namespaces) the toolkit's venv ``ansible-playbook -c local -i localhost,`` of
``ansible/playbooks/bootstrap.yml`` with the variables the toolkit's push path gives that host
(its inventory variables flattened, minus how to reach it over SSH, plus the same extra vars as
``bench/bench_bootstrap.py``; the artifact is a local path on the shared file system). No SSH.

Each host's result is checked: exit 0, nothing failed or unreachable in the recap, and the play's
own last step (the node manager is up) ran ok. Measured per size: wall from the first start to the
last host done, CPU seconds of each host's pull (``wait4`` resource usage: ``ansible-playbook``
and everything it waited for) and of the whole cgroup the pulls ran in
(``bench/bootstrap_profile.py``). Printed: scale-hosts / hosts wall (issue 20's target <= 3.5)
(at other sizes, the same 0.7 of linear) and the CPU per host, to set against push's (about
4.8 s per host, docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import bootstrap_profile as prof
from bench.bench_bootstrap import ROOT, TARGET_SCALE, _config, _cpu_delta, _extravars, _records, lh
from orchestrator.clients.ansible.inventory import build_inventory
from orchestrator.clients.ansible.runner import strategy_env
from orchestrator.services.bootstrap import common_vars, hook_vars, template_bootstrap

PUSH_CPU_PER_HOST = 4.8  # s, push with mitogen_linear, forks 20 (docs/performance.md, issue 20)
# How the push path reaches a host: meaningless when the host runs the play on itself.
SSH_VARS = frozenset(
    {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_common_args", "ansible_ssh_private_key_file"}
)
CHECK_TASK = "Check the supervised node manager"
_RECAP = re.compile(r"^localhost\s+:\s+(.*)$", re.MULTILINE)


def host_vars(inventory: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One host's variables from the push path's inventory document, as one flat mapping.

    In the order Ansible applies them: ``all``'s vars, then each group holding the host (its
    ``vars``, then its ``site_vars``), then the host's own; the SSH connection variables dropped.
    """
    body = inventory.get("all", {})
    out: dict[str, Any] = dict(body.get("vars") or {})
    for group in (body.get("children") or {}).values():
        if name in (group.get("hosts") or {}):
            out.update(group.get("vars") or {})
            out.update(group.get("site_vars") or {})
    out.update((body.get("hosts") or {}).get(name) or {})
    return {k: v for k, v in out.items() if k not in SSH_VARS}


def recap(output: str) -> dict[str, int]:
    """The ``PLAY RECAP`` counters of ``localhost`` (empty when the play never got that far)."""
    found = _RECAP.findall(output)
    if not found:
        return {}
    return {k: int(v) for k, v in (item.split("=", 1) for item in found[-1].split())}


def failure(returncode: int, output: str) -> str | None:
    """Why one host's pull did not bootstrap it, or None when it did (its node manager checked up)."""
    counts = recap(output)
    if returncode != 0:
        return f"exit {returncode}, recap {counts or 'missing'}"
    if not counts or counts.get("failed", 0) or counts.get("unreachable", 0):
        return f"recap {counts or 'missing'}"
    check = output.rfind(f"{CHECK_TASK}] ")
    if check < 0 or "ok: [localhost]" not in output[check:]:
        return f"the task '{CHECK_TASK}' did not run ok"
    return None


@dataclass
class PullRun:
    """One burst of pulls: wall seconds, each host's CPU seconds, the cgroup's CPU seconds, the hosts that failed."""

    hosts: int
    wall: float
    host_cpu: list[float]
    group_cpu: prof.CpuSeconds | None
    failed: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line of figures."""
        cpu = self.host_cpu
        text = (
            f"pull {self.hosts:>3} hosts: wall {self.wall:7.2f} s, CPU per host mean {statistics.fmean(cpu):.2f} s "
            f"(min {min(cpu):.2f}, max {max(cpu):.2f}), pulls' CPU {sum(cpu):.1f} s"
        )
        if self.group_cpu is not None:
            text += f"; cgroups: pulls {self.group_cpu.control:.1f} s, hosts' sshd {self.group_cpu.hosts:.1f} s"
        text += f" (of {2 * self.wall:.1f} core-seconds on 2 cores)"
        if self.failed:
            text += f"\n  FAILED on {len(self.failed)} of {self.hosts} hosts, e.g. " + "; ".join(self.failed[:3])
        return text


def scale_target(small: int, big: int) -> float:
    """Issue 20's 3.5 for 100 / 20 hosts is 0.7 of linear; the same share of linear at other sizes."""
    return round(TARGET_SCALE / 5 * big / small, 2)


def verdict(small: PullRun, big: PullRun) -> str:
    """The scale ratio against issue 20's target (scaled to the sizes run), and the CPU per host against push's."""
    ratio = big.wall / small.wall
    target = scale_target(small.hosts, big.hosts)
    cpu = statistics.fmean(big.host_cpu + small.host_cpu)
    mark = "PASS" if ratio <= target else "MISS"
    return (
        f"pull {big.hosts} / {small.hosts} hosts = {ratio:.2f} (linear {big.hosts / small.hosts:.2f}, "
        f"target <= {target}) {mark}; CPU per host {cpu:.2f} s vs push's ~{PUSH_CPU_PER_HOST} s "
        f"({cpu / PUSH_CPU_PER_HOST:.2f})"
    )


def host_python(base: Path) -> Path:
    """A Python the hosts can run that imports the toolkit venv's Ansible.

    The toolkit venv's interpreter may live under /root (pyenv), which a simulated host hides
    behind its own empty /root; so the hosts run the machine's /usr/bin/python3 (a venv of it
    whose one ``.pth`` adds the toolkit venv's site-packages: the same Ansible, the same minor
    Python), as a cloud image would run the Ansible installed on it.
    """
    env = base / "host-python"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(env)], check=True)
    purelib = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (env / "lib" / version / "site-packages" / "toolkit.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    return env / "bin" / "python"


def pull_argv(host_pid: int, python: Path, vars_file: Path) -> list[str]:
    """``ansible-playbook -c local`` of the bootstrap inside the namespaces of the host whose init is ``host_pid``."""
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    play = ["-c", "local", "-i", "localhost,", "-e", f"@{vars_file}", str(ROOT / "ansible/playbooks/bootstrap.yml")]
    return ["nsenter", "-t", str(host_pid), "-m", "-u", "-p", "--", str(python), playbook, *play]


def pull_env(strategy: str) -> dict[str, str]:
    """The toolkit's ansible.cfg and roles, the strategy asked for; HOME is each host's own /root."""
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "ansible" / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "HOME": "/root",
        **strategy_env("linear" if strategy == "linear" else "mitogen_linear"),
    }


def run_pulls(
    base: Path, n: int, artifact: Path, python: Path, venv_modules: bool, strategy: str, split: Any
) -> PullRun:
    """Start ``n`` fresh hosts, then their pulls all at once; wait for every one and check it."""
    work = Path(tempfile.mkdtemp(prefix=f"pull{n}-", dir=base))
    lab = lh.LoopbackLab(work / "lab")
    try:
        for i in range(n):
            lab.start(f"b{i:03d}", record_key=False)
        lab.wait_ready(timeout=max(10.0, n / 2))
        if split is not None:
            split.adopt([h.pid for h in lab.hosts.values()])
        config = _config(work, lab.key, 20).config
        document = build_inventory(_records(lab), common_vars(config, lab.known_hosts), template_bootstrap(config))
        evars = {**hook_vars(config), **_extravars(artifact)}
        if venv_modules:
            evars["ansible_python_interpreter"] = str(python)
        argvs: dict[int, tuple[str, list[str], Path]] = {}
        for name, host in lab.hosts.items():
            vars_file = work / f"{name}.json"
            vars_file.write_text(json.dumps({**host_vars(document, name), **evars}))
            argvs[host.pid] = (name, pull_argv(lh._first_child(host.pid), python, vars_file), work / f"{name}.log")
        env = pull_env(strategy)
        before = split.read() if split is not None else None
        started = time.perf_counter()
        procs: dict[int, tuple[str, subprocess.Popen[bytes], Path]] = {}
        for name, argv, log in argvs.values():
            with log.open("wb") as out:
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            procs[proc.pid] = (name, proc, log)
        cpu, bad = _reap(procs)
        wall = time.perf_counter() - started
        after = split.read() if split is not None else None
        return PullRun(n, wall, cpu, _cpu_delta(before, after), bad)
    finally:
        lab.stop_all()


def _reap(procs: Mapping[int, tuple[str, subprocess.Popen[bytes], Path]]) -> tuple[list[float], list[str]]:
    """Each pull's CPU seconds (its resource usage, children included) and the hosts that failed."""
    cpu: list[float] = []
    bad: list[str] = []
    waiting = set(procs)
    while waiting:
        for pid in list(waiting):
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done == 0:
                continue
            waiting.discard(pid)
            name, proc, log = procs[pid]
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            cpu.append(usage.ru_utime + usage.ru_stime)
            reason = failure(proc.returncode, log.read_text(errors="replace"))
            if reason is not None:
                bad.append(f"{name}: {reason}")
                if len(bad) == 1:  # the first failure's play output, before its directory goes
                    print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
        time.sleep(0.05)
    return cpu, bad


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    """Measure a burst of pulls at both sizes and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--scale-hosts", type=int, default=100)
    parser.add_argument(
        "--interpreter",
        choices=["system", "venv"],
        default="system",
        help="modules run by /usr/bin/python3 as in push (system) or by the Python running ansible-playbook (venv)",
    )
    parser.add_argument("--strategy", choices=["linear", "mitogen_linear"], default="linear")
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio misses its target")
    args = parser.parse_args(argv)
    if not lh.sshd_available() or not Path("/usr/bin/nsenter").exists():
        print("bench_pull_cost: needs root, sshd, unshare and nsenter (simulated hosts)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="xceprov-bench-pull-") as tmp, prof.cpu_split() as split:
        base = Path(tmp)
        from orchestrator.sim.nodemanager import build_artifact

        artifact = Path(build_artifact(base / "artifact"))
        python = host_python(base)
        runs: list[PullRun] = []
        for n in (args.hosts, args.scale_hosts):
            runs.append(run_pulls(base, n, artifact, python, args.interpreter == "venv", args.strategy, split))
            print(runs[-1].line() + f"  (load {_load()})", flush=True)
    print(f"pull, interpreter {args.interpreter}, strategy {args.strategy}, load {_load()}")
    print(verdict(runs[0], runs[1]))
    if any(run.failed for run in runs):
        return 1  # a host not bootstrapped: its figures are not those of a bootstrap
    return 1 if args.check and runs[1].wall / runs[0].wall > scale_target(args.hosts, args.scale_hosts) else 0


if __name__ == "__main__":
    sys.exit(main())
