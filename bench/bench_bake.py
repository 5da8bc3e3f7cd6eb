"""Benchmark: baking itself (issue 30, "Baking itself"): the time to bake, and what a bake costs.

Run (root: simulated hosts): ``.venv/bin/python bench/bench_bake.py [--rounds 2]``.

The world is the product's own with simulated hosts (``xceprov sim up`` in a test lab of its
own, ``tests/sim_labs.py``, a free controller port, a temporary directory). Each round runs
``xceprov image bake cpu --provider sim --json`` as an operator would (a process of its own):

- ``seconds``: the command's wall time, from start to the image id on stdout (builder intent,
  create, boot, the bake play over SSH, the image, the builder's return);
- ``instance_minutes``: what the bake costs: the builder's lifetime in the simulated cloud
  (launch to termination, from the cloud's own records), in minutes of one instance; a cloud
  bills the builder's flavor for that long, and the image's storage from then on.

Printed as JSON with the machine's load average (the figures depend on the machine; there is
no raw tool and no target: issue 30 asks for the figures to be recorded, docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sim_world_helpers import SimWorld, can_run_hosts, world_with_hosts  # type: ignore[import-not-found]


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def one_bake(world: SimWorld, template: str = "cpu", *extra: str) -> dict[str, Any]:
    """One ``image bake`` through the command line: its wall time and the builder's lifetime
    (``extra``: more arguments, ``--from IMAGE`` for a template whose image is ``bake:newest``)."""
    start = time.monotonic()
    made = json.loads(world.ok("image", "bake", template, "--provider", "sim", "--json", *extra, timeout=900))
    seconds = time.monotonic() - start
    [builder] = world.store.list_instances({"xce:op_id": made["op_id"]}, include_terminated=True)
    lived = _seconds(builder.terminated_at) - _seconds(builder.launch_time)
    return {
        "image_id": made["image_id"],
        "seconds": round(seconds, 2),
        "instance_minutes": round(lived / 60, 3),
        "builder_state": builder.state,
    }


def run(rounds: int) -> dict[str, Any]:
    """``rounds`` bakes in one world with simulated hosts."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-bake-") as tmp,
        world_with_hosts(Path(tmp) / "site", f"bb-{secrets.token_hex(3)}", f"bench-bake-{os.getpid()}") as world,
    ):
        bakes = [one_bake(world) for _ in range(rounds)]
    return {
        "bakes": bakes,
        "seconds_median": round(statistics.median(b["seconds"] for b in bakes), 2),
        "instance_minutes_median": round(statistics.median(b["instance_minutes"] for b in bakes), 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="Bakes to run (default 2).")
    args = parser.parse_args(argv)
    if not can_run_hosts():
        print("bench_bake: simulated hosts need root and pycapnp", file=sys.stderr)
        return 2
    print(json.dumps(run(args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
