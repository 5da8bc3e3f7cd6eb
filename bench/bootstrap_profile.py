"""Where a bootstrap's time goes: ``bench/bench_bootstrap.py --profile``.

- per task: the timing callback (``bench/callbacks/bench_timing.py``) records when the strategy
  started each task and when each host's result came back;
- CPU: the benchmark process (and so ``ansible-playbook``, its workers and their ssh clients,
  including ControlPersist masters) runs in one cgroup, the simulated hosts (their sshd and every
  session and module under it) in another; cgroup v1 ``cpuacct`` gives each side's CPU seconds;
- SSH: the cost of a fresh connection and of a command over an open master, measured on the
  hosts beside the play.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CALLBACKS = Path(__file__).resolve().parent / "callbacks"
TIMING_VAR = "XCEPROV_BENCH_TIMING"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


@dataclass
class CpuSeconds:
    """CPU seconds used on the control side and on the hosts' side during one play."""

    control: float
    hosts: float

    @property
    def total(self) -> float:
        """CPU seconds of both sides."""
        return self.control + self.hosts


@dataclass(frozen=True)
class Play:
    """One measured play: its hosts, its wall seconds (ansible-runner's) and the CPU of both sides."""

    hosts: int
    wall: float
    cpu: CpuSeconds

    @property
    def per_host(self) -> float:
        """CPU seconds of both sides per host."""
        return self.cpu.total / self.hosts

    def busy(self, cores: int) -> float:
        """The share of the machine's core-seconds during the play that either side used."""
        return self.cpu.total / (cores * self.wall)


def scale_floor(small: Play, big: Play, cores: int) -> float:
    """The lowest big / small wall ratio these plays' CPU allows.

    Wall time is at least CPU over the cores; so ``big.wall / small.wall`` is at least
    ``(big CPU / cores) / small.wall`` = CPU ratio × the small play's busy share, reached only
    if the big play kept every core busy all the time. Below it only by costing less CPU per
    host at the bigger size.
    """
    return big.cpu.total / (cores * small.wall)


def print_scale_floor(small: Play, big: Play, cores: int) -> None:
    """The CPU per host of both sizes, their busy shares, and :func:`scale_floor`."""
    print(
        f"  CPU per host: {small.hosts} hosts {small.per_host:.2f} s, {big.hosts} hosts {big.per_host:.2f} s; "
        f"busy {small.busy(cores):.0%} / {big.busy(cores):.0%} of {cores} cores; "
        f"lowest {big.hosts} / {small.hosts} ratio this CPU allows: {scale_floor(small, big, cores):.2f}",
        flush=True,
    )


class CpuSplit:
    """Two cpuacct cgroups: this process and its descendants, and the simulated hosts."""

    def __init__(self) -> None:
        tag = f"xceprov-bench-{os.getpid()}"
        self.control = CPUACCT / f"{tag}-control"
        self.hosts = CPUACCT / f"{tag}-hosts"
        self.control.mkdir()
        self.hosts.mkdir()
        (self.control / "cgroup.procs").write_text(str(os.getpid()))

    def adopt(self, pids: Sequence[int]) -> None:
        """Move ``pids`` and all their descendants into the hosts' group."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        todo = list(pids)
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError):
                (self.hosts / "cgroup.procs").write_text(str(pid))
            todo.extend(children.get(pid, []))

    def read(self) -> CpuSeconds:
        """CPU seconds each group used since it was made."""
        return CpuSeconds(_usage(self.control), _usage(self.hosts))

    def close(self) -> None:
        """Everything back to the root group; the two groups removed (killed hosts take a moment to leave)."""
        for group in (self.control, self.hosts):
            remove_group(group)


def remove_group(group: Path) -> None:
    """Move what ``group`` holds back to the root group, then remove it (within 10 s)."""
    deadline = time.monotonic() + 10
    while group.exists() and time.monotonic() < deadline:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CPUACCT / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            group.rmdir()
            break
        time.sleep(0.2)


def _usage(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


@contextlib.contextmanager
def cpu_split() -> Iterator[CpuSplit | None]:
    """A ``CpuSplit`` where cgroup v1 cpuacct is writable, else None."""
    try:
        split = CpuSplit()
    except OSError:
        yield None
        return
    try:
        yield split
    finally:
        split.close()


def task_table(timing: Path) -> list[tuple[str, float, float]]:
    """Per task name (summed over its runs): seconds until the next task, and the mean host's seconds."""
    data = json.loads(timing.read_text())
    tasks: list[dict[str, Any]] = data["tasks"]
    rows: dict[str, list[float]] = {}
    for i, task in enumerate(tasks):
        ends = [float(v[0]) for v in task["hosts"].values()]
        nxt = tasks[i + 1]["start"] if i + 1 < len(tasks) else data["total"]
        wall = nxt - task["start"]  # linear: the next task starts once every host is done
        mean = statistics.fmean(e - task["start"] for e in ends) if ends else 0.0
        row = rows.setdefault(task["name"], [0.0, 0.0])
        row[0] += wall
        row[1] += mean
    return [(name, wall, mean) for name, (wall, mean) in rows.items()]


def print_profile(side: str, timing: Path, wall: float, cpu: CpuSeconds | None) -> None:
    """The per-task table and the CPU split of one side's play."""
    rows = task_table(timing)
    covered = sum(r[1] for r in rows)
    print(f"  {side}: per task (wall = task start to the next task's start; host = mean per host)")
    for name, tw, hm in sorted(rows, key=lambda r: -r[1]):
        if tw >= 0.05:
            print(f"    {tw:7.2f} s  host {hm:6.2f} s  {name}")
    print(f"    {covered:7.2f} s  in tasks of {wall:.2f} s wall")
    if cpu is not None:
        print(
            f"  {side}: CPU control {cpu.control:.1f} s, hosts {cpu.hosts:.1f} s "
            f"(of {2 * wall:.1f} core-seconds on 2 cores in the play)"
        )


def ssh_costs(key: Path, known_hosts: Path, targets: Sequence[tuple[str, int]], work: Path) -> str:
    """Mean ms of a fresh ``ssh host true`` and of one over an open master."""
    base = [
        "ssh",
        "-i",
        str(key),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]
    fresh: list[float] = []
    over: list[float] = []
    for address, port in targets:
        cp = str(work / f"cm-{address}")
        argv = [*base, "-p", str(port), f"root@{address}", "true"]
        t = time.perf_counter()
        subprocess.run([*argv[:1], "-o", "ControlMaster=no", "-o", "ControlPath=none", *argv[1:]], check=True)
        fresh.append(time.perf_counter() - t)
        master = [*argv[:1], "-o", "ControlMaster=auto", "-o", f"ControlPath={cp}", "-o", "ControlPersist=30s"]
        subprocess.run([*master, *argv[1:]], check=True)
        t = time.perf_counter()
        subprocess.run([*master, *argv[1:]], check=True)
        over.append(time.perf_counter() - t)
        subprocess.run([*master, "-O", "exit", *argv[1:-1]], check=False, capture_output=True)
    return (
        f"ssh: fresh connection {1000 * statistics.fmean(fresh):.0f} ms, "
        f"command over an open master {1000 * statistics.fmean(over):.0f} ms (mean of {len(targets)})"
    )
