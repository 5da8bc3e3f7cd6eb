"""Benchmark: bootstrap of 20 simulated hosts, forks 20: the toolkit's run / raw ``ansible-playbook``.

Run (root): ``.venv/bin/python bench/bench_bootstrap.py [--hosts 20] [--forks 20] [--rounds 1] [--check]``.

Each measurement gets its own fresh set of hosts (``tests/loopback_hosts.py``: one sshd per host
on its own loopback address, private /etc, /opt, /var and /root), so both sides do the same
work: a first bootstrap of the simulated node manager artifact. The two sides:

- toolkit: ``orchestrator.services.bootstrap.bootstrap()`` — host keys recorded on first contact
  (``ssh-keyscan``), inventory written, ansible-runner with per-host event handling, artifacts
  kept and rotated; the hosts' keys are *not* handed to it;
- raw: ``ansible-playbook -i <inventory> ansible/playbooks/bootstrap.yml`` with the same
  environment (``ansible_env``), extra vars, forks and inventory shape, the hosts' keys written
  to its known_hosts beforehand (what an operator's own setup would have).

With ``--rounds N`` the sides alternate which goes first and the best time of each counts,
which keeps a busy machine's noise out of the ratio. Target: toolkit / raw <= 1.1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from orchestrator.clients.ansible.inventory import INVENTORY_NAME, InstanceRecord, build_inventory, write_inventory
from orchestrator.clients.ansible.runner import ansible_env
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.services.bootstrap import (
    bootstrap,
    common_vars,
    runner_settings,
    template_bootstrap,
)

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.1


def _lab_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loopback_hosts", ROOT / "tests" / "loopback_hosts.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


lh = _lab_module()


def _config(work: Path, key: Path, forks: int) -> LoadedConfig:
    ca = work / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nBENCH\n-----END CERTIFICATE-----\n")
    text = f"""
cluster: bench
state_dir: {work / "state"}
controller: {{addresses: ["127.0.0.1:7441"], ca: {ca}}}
ansible: {{ssh_key: {key}, forks: {forks}, timeout: 1800s}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu: {{providers: {{sim: {{flavor: c8, image: debian-12}}}}}}
"""
    return parse_config(text, str(work / "xceprov.yaml"), work)


def _records(lab: Any) -> list[InstanceRecord]:
    return [
        InstanceRecord(f"op1-{i:03d}", h.instance_id, h.name, h.address, "cpu", "sim", "op1", h.port)
        for i, h in enumerate(lab.hosts.values())
    ]


def _extravars(artifact: Path) -> dict[str, Any]:
    return {
        "xce_node_manager_install_method": "artifact",
        "xce_node_manager_archive_src": str(artifact),
        "xce_node_manager_interpreter": "/usr/bin/python3",
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def _start(work: Path, n: int, record_keys: bool) -> Any:
    lab = lh.LoopbackLab(work / "lab")
    for i in range(n):
        lab.start(f"b{i:02d}", record_key=record_keys)
    lab.wait_ready()
    return lab


def run_toolkit(base: Path, n: int, forks: int, artifact: Path) -> float:
    """Seconds of the toolkit's bootstrap of ``n`` fresh hosts."""
    work = Path(tempfile.mkdtemp(prefix="tk-", dir=base))
    lab = _start(work, n, record_keys=False)
    try:
        loaded = _config(work, lab.key, forks)
        started = time.perf_counter()
        result = bootstrap(loaded, ROOT, records=_records(lab), extra_vars=_extravars(artifact))
        elapsed = time.perf_counter() - started
        bad = [r.describe() for r in result.hosts.values() if r.status != "changed"]
        if bad:
            raise SystemExit("toolkit run failed: " + "; ".join(bad[:3]))
        # Where the toolkit's time goes: ansible-runner's run vs the rest (host keys, inventory).
        print(
            f"         toolkit: ansible-runner {result.elapsed:.2f} s, "
            f"host keys + inventory {elapsed - result.elapsed:.2f} s",
            flush=True,
        )
        return elapsed
    finally:
        lab.stop_all()


def run_raw(base: Path, n: int, forks: int, artifact: Path) -> float:
    """Seconds of a raw ``ansible-playbook`` of the same play on ``n`` fresh hosts."""
    work = Path(tempfile.mkdtemp(prefix="raw-", dir=base))
    lab = _start(work, n, record_keys=True)
    try:
        loaded = _config(work, lab.key, forks)
        config = loaded.config
        inv = write_inventory(
            work / "inventory" / INVENTORY_NAME,
            build_inventory(_records(lab), common_vars(config, lab.known_hosts), template_bootstrap(config)),
        )
        evars = work / "extravars.json"
        evars.write_text(json.dumps(_extravars(artifact)))
        env = ansible_env(runner_settings(config, ROOT))
        argv = [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            "--forks",
            str(forks),
            "-e",
            f"@{evars}",
            str(ROOT / "ansible" / "playbooks" / "bootstrap.yml"),
        ]
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"raw run failed (rc={proc.returncode}): {proc.stdout[-2000:]}")
        return elapsed
    finally:
        lab.stop_all()


def main() -> int:
    """Run the benchmark and print both times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--check", action="store_true", help=f"exit 1 when the ratio exceeds {TARGET_RATIO}")
    args = parser.parse_args()
    if not lh.sshd_available():
        print("bench_bootstrap: needs root, sshd and unshare (simulated hosts)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="xceprov-bench-bootstrap-") as tmp:
        base = Path(tmp)
        from orchestrator.sim.nodemanager import build_artifact

        artifact = Path(build_artifact(base / "artifact"))
        toolkit: list[float] = []
        raw: list[float] = []
        for rnd in range(args.rounds):
            order = [("toolkit", run_toolkit), ("raw", run_raw)]
            if rnd % 2:
                order.reverse()
            for name, fn in order:
                seconds = fn(base, args.hosts, args.forks, artifact)
                (toolkit if name == "toolkit" else raw).append(seconds)
                print(f"round {rnd + 1}: {name:<7} {seconds:7.2f} s", flush=True)
    best_t, best_r = min(toolkit), min(raw)
    ratio = best_t / best_r
    print(f"bootstrap of {args.hosts} hosts, forks {args.forks}, best of {args.rounds} round(s)")
    print(f"toolkit {best_t:.2f} s  raw ansible-playbook {best_r:.2f} s  ratio {ratio:.3f} (target <= {TARGET_RATIO})")
    return 1 if args.check and ratio > TARGET_RATIO else 0


if __name__ == "__main__":
    sys.exit(main())
