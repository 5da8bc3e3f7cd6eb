"""Benchmark: ``terraform apply`` of 1000 vs 500 instances of the simulated cloud.

Run: ``.venv/bin/python bench/bench_sim_apply.py [--small 500] [--large 1000] [--rounds 2] [--check]``.

Both applies run in the same run, each in a fresh working directory with a fresh cloud store,
after a small warm-up apply (provider start, certificate cache, page cache). With ``--rounds N``
(default 2) the pair is measured N times, interleaved, and the best time of each size counts,
which keeps a busy machine's noise out of the ratio. The figure
of merit is the ratio large/small: a store with O(1) cost per object keeps it near
large/small = 2 (target <= 2.2); anything super-linear (whole-store rewrites, unindexed
lookups) shows up as a clearly larger ratio. Seconds depend on the machine; the ratio does not.
With ``--check`` the exit code is 1 when the ratio exceeds the target.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, plugin_cache_dir
from orchestrator.sim.cloud.store import CloudStore

TARGET_RATIO = 2.2

MAIN_TF = """
terraform {
  required_providers {
    xcesim = {
      source  = "registry.terraform.io/xce/xcesim"
      version = "0.1.0"
    }
  }
}

variable "store" {
  type = string
}

variable "instances" {
  type = map(object({
    name   = string
    flavor = string
    image  = string
    tags   = map(string)
  }))
}

provider "xcesim" {
  store = var.store
}

resource "xcesim_instance" "this" {
  for_each     = var.instances
  name         = each.value.name
  flavor       = each.value.flavor
  image        = each.value.image
  tags         = each.value.tags
  user_data    = "#cloud-config\\n"
  client_token = each.key
}
"""


def _desired(n: int) -> dict[str, dict[str, object]]:
    return {
        f"bench-{i}": {
            "name": f"bench-{i}",
            "flavor": "c8.large",
            "image": "debian-12",
            "tags": {
                "xce:cluster": "bench",
                "xce:provider": "sim",
                "xce:op_id": "bench",
                "xce:epoch": "1.1",
                "xce:template": "cpu",
            },
        }
        for i in range(n)
    }


def apply_seconds(root: Path, name: str, count: int, engine: BundledEngine) -> float:
    """Seconds of one ``terraform apply`` creating ``count`` instances in a fresh directory."""
    workdir = root / name
    workdir.mkdir()
    (workdir / "main.tf").write_text(MAIN_TF)
    store_path = root / f"{name}.sqlite"
    (workdir / "desired.tfvars.json").write_text(
        json.dumps({"store": str(store_path), "instances": _desired(count)})
    )
    engine.init(workdir)
    started = time.perf_counter()
    result = engine.apply(workdir, var_files=[Path("desired.tfvars.json")])
    seconds = time.perf_counter() - started
    created = len(CloudStore(store_path).list_instances({"xce:cluster": "bench"}))
    if result.summary.add != count or created != count:
        raise SystemExit(f"bench: {name}: expected {count} instances, Terraform added {result.summary.add}, "
                         f"the store holds {created}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one summary line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="measurements per size (best counts)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when the ratio exceeds {TARGET_RATIO}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xce-bench-sim-") as tmp:
        root = Path(tmp)
        cli_config = ensure_mirror(root / "tf", [XCESIM])
        engine = BundledEngine(cli_config=cli_config, plugin_cache_dir=plugin_cache_dir(root / "tf"))
        apply_seconds(root, "warmup", 20, engine)
        smalls: list[float] = []
        larges: list[float] = []
        for n in range(max(1, args.rounds)):
            smalls.append(apply_seconds(root, f"small{n}", args.small, engine))
            larges.append(apply_seconds(root, f"large{n}", args.large, engine))
            print(f"  round {n + 1}: {args.small}: {smalls[-1]:.1f} s, {args.large}: {larges[-1]:.1f} s",
                  file=sys.stderr)
    small, large = min(smalls), min(larges)
    ratio = large / small
    expected = args.large / args.small
    verdict = "ok" if ratio <= TARGET_RATIO * expected / 2 else "SLOW"
    print(
        f"bench_sim_apply: apply {args.small} instances {small:.1f} s, {args.large} instances {large:.1f} s, "
        f"ratio {ratio:.2f} (target <= {TARGET_RATIO * expected / 2:.2f}): {verdict}"
    )
    return 1 if args.check and verdict != "ok" else 0


if __name__ == "__main__":
    sys.exit(main())
