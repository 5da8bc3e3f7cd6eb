"""Benchmark: the host-key step of a bootstrap, scanned (ssh-keyscan) vs published (read from consoles).

Run (root): ``.venv/bin/python bench/bench_hostkeys.py [--hosts 20] [--rounds 2]``.

Each side of each round gets its own fresh loopback hosts (``tests/loopback_hosts.py``), started
together and handed at once to ``HostKeyStore.ensure`` as a bootstrap does right after an apply:

- ``scan``: policy ``record`` with no key source: every host is scanned, retried until its sshd
  answers (the toolkit's behaviour before published keys);
- ``published``: the same with the hosts' consoles as the key source: each host's key block is
  read as soon as it is printed, no ssh-keyscan runs.

Reported: wall time of the step from the hosts' start (a cold burst) and from ready hosts (a
re-run or late bootstrap); ``until_ssh``, the time until the keys are known *and* every sshd
accepts connections (a published key can be known before sshd is up, and the play waits for
sshd anyway: for a cold burst this is the fair comparison); the CPU time of the toolkit's child
processes (ssh-keyscan) and of its own process; and the load average. Sides alternate which
goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.clients.ansible.hostkeys import HostKeyStore, KeySource, KeyTarget

ROOT = Path(__file__).resolve().parents[1]


# The loopback hosts are a test helper (tests/ is no package): import it from its directory.
sys.path.insert(0, str(ROOT / "tests"))
import loopback_hosts as lh  # noqa: E402 - needs the path above


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def one_side(base: Path, n: int, side: str, warm: bool) -> dict[str, float]:
    """Start ``n`` fresh hosts and time the key step of ``side`` (``scan`` or ``published``)."""
    lab = lh.LoopbackLab(base / "lab")
    try:
        hosts = [lab.start(f"k{i:03d}", record_key=False) for i in range(n)]
        if warm:
            lab.wait_ready(timeout=120)
        targets = [KeyTarget(h.name, h.instance_id, h.address, h.port) for h in hosts]
        store = HostKeyStore(base / "keys")
        source: KeySource | None = lh.LoopbackConsoles(lab) if side == "published" else None
        own0, kids0 = _cpu()
        started = time.monotonic()
        problems = store.ensure(targets, "record", wait=120, workers=20, source=source, publish_wait=120)
        took = time.monotonic() - started
        own1, kids1 = _cpu()
        # Under heavy load a scan can fail where the play would still connect (ssh-keyscan gives
        # each try 2 s): counted, and the step's time is then the wait it spent.
        # A published key may be known before sshd is up; the play waits for sshd anyway, so the
        # fair end of the step for a cold burst is "keys known and every sshd accepting".
        while not all(lh.port_open(h.address, h.port) for h in hosts) and time.monotonic() - started < 300:
            time.sleep(0.05)
        until_ssh = time.monotonic() - started
        return {
            "wall": took,
            "until_ssh": until_ssh,
            "own_cpu": own1 - own0,
            "child_cpu": kids1 - kids0,
            "hosts_without_key": len(problems),
        }
    finally:
        lab.stop_all()


def main() -> int:
    """Run the rounds and print one JSON document."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    out: dict[str, Any] = {"hosts": args.hosts, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-hostkeys-") as tmp:
        for rnd in range(args.rounds):
            order = ["scan", "published"] if rnd % 2 == 0 else ["published", "scan"]
            row: dict[str, Any] = {"load": os.getloadavg()[0]}
            for warm in (False, True):
                for side in order:
                    base = Path(tmp) / f"r{rnd}-{side}-{'warm' if warm else 'cold'}"
                    row[f"{side}_{'warm' if warm else 'cold'}"] = one_side(base, args.hosts, side, warm)
            out["rounds"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    for kind in ("cold", "warm"):
        best = {s: min(r[f"{s}_{kind}"]["until_ssh"] for r in out["rounds"]) for s in ("scan", "published")}
        out[f"best_until_ssh_{kind}"] = best
        out[f"saved_per_host_{kind}_s"] = (best["scan"] - best["published"]) / args.hosts
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
