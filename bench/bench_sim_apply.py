"""Benchmark: ``terraform apply`` of 1000 vs 500 instances of the simulated cloud.

Run: ``.venv/bin/python bench/bench_sim_apply.py [--small 500] [--large 1000] [--rounds 1]
[--no-baseline] [--check]``.

Every apply runs in a fresh working directory with a fresh cloud store, after a small warm-up
apply (provider start, certificate cache, page cache). With ``--rounds N`` each size is measured
N times, interleaved, and the best time counts, which keeps a busy machine's noise out of the
ratios. Three figures are reported, each as large/small (linear = 2.0, target <= 2.2):

- ``apply``: wall time of ``terraform apply`` with the ``xcesim`` provider (the figure asked for);
- ``terraform alone``: the same configuration shape with Terraform's built-in ``terraform_data``
  instead of ``xcesim_instance`` (no provider at all), i.e. Terraform core's own scaling;
- ``provider``: seconds the provider spent inside the store per instance (the benchmark's own
  timed provider, ``bench/xcesim_timed.py``),
  i.e. the part this code controls; O(1) per object keeps this ratio near 2.

Seconds depend on the machine and its load; the ratios much less. With ``--check`` the exit code
is 1 when the provider's own ratio exceeds the target (Terraform core's scaling is not ours).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.clients.terraform.mirror import ensure_mirror, plugin_cache_dir
from orchestrator.sim.cloud.store import CloudStore

# Run as a script (bench/ is sys.path[0]); the timed provider is imported as ``bench.xcesim_timed``,
# the name Terraform's launcher runs it by.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.xcesim_timed import CHECKOUT, STATS_ENV, TIMED_XCESIM

TARGET_RATIO = 2.2

_HEAD = """
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
"""

XCESIM_TF = (
    _HEAD
    + """
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
)

# Same shape, no provider: what Terraform core costs by itself.
BASELINE_TF = (
    _HEAD
    + """
resource "terraform_data" "this" {
  for_each = var.instances
  input = {
    name         = each.value.name
    flavor       = each.value.flavor
    image        = each.value.image
    tags         = each.value.tags
    user_data    = "#cloud-config\\n"
    client_token = each.key
  }
}
"""
)


@dataclass
class Run:
    """One measured apply."""

    seconds: float
    provider_seconds: float  # inside the store, summed over calls (0 for the baseline)


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


def apply_once(root: Path, name: str, count: int, cli_config: Path, baseline: bool = False) -> Run:
    """One ``terraform apply`` creating ``count`` objects in a fresh directory."""
    workdir = root / name
    workdir.mkdir()
    (workdir / "main.tf").write_text(BASELINE_TF if baseline else XCESIM_TF)
    store_path = root / f"{name}.sqlite"
    stats = root / f"{name}.stats.jsonl"
    (workdir / "desired.tfvars.json").write_text(json.dumps({"store": str(store_path), "instances": _desired(count)}))
    cache = plugin_cache_dir(cli_config.parent)
    env = {STATS_ENV: str(stats), "PYTHONPATH": str(CHECKOUT)}
    engine = BundledEngine(cli_config=cli_config, plugin_cache_dir=cache, env=env)
    engine.init(workdir)
    started = time.perf_counter()
    result = engine.apply(workdir, var_files=[Path("desired.tfvars.json")])
    seconds = time.perf_counter() - started
    created = count if baseline else len(CloudStore(store_path).list_instances({"xce:cluster": "bench"}))
    if result.summary.add != count or created != count:
        raise SystemExit(
            f"bench: {name}: expected {count} objects, Terraform added {result.summary.add}, the store holds {created}"
        )
    provider_seconds = 0.0
    if stats.exists():
        for line in stats.read_text().splitlines():
            provider_seconds += json.loads(line)["calls"].get("create", {}).get("seconds", 0.0)
    return Run(seconds, provider_seconds)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one summary line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1, help="measurements per size (best counts)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the terraform_data baseline")
    parser.add_argument("--check", action="store_true", help="exit 1 if the provider's ratio is over target")
    args = parser.parse_args(argv)
    sizes = (args.small, args.large)
    runs: dict[tuple[str, int], list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="xce-bench-sim-") as tmp:
        root = Path(tmp)
        cli_config = ensure_mirror(root / "tf", [TIMED_XCESIM])
        apply_once(root, "warmup", 20, cli_config)
        kinds = ["xcesim"] + ([] if args.no_baseline else ["baseline"])
        for n in range(max(1, args.rounds)):
            for kind in kinds:
                for size in sizes:
                    run = apply_once(root, f"{kind}{size}-{n}", size, cli_config, baseline=kind == "baseline")
                    runs.setdefault((kind, size), []).append(run)
                    print(f"  round {n + 1}: {kind} {size}: {run.seconds:.1f} s", file=sys.stderr)

    def best(kind: str, size: int) -> Run:
        return min(runs[(kind, size)], key=lambda r: r.seconds)

    small, large = best("xcesim", args.small), best("xcesim", args.large)
    scale = (args.large / args.small) / 2  # targets are stated for large = 2 x small
    target = TARGET_RATIO * scale
    ratio = large.seconds / small.seconds
    per_small = min(r.provider_seconds for r in runs[("xcesim", args.small)]) / args.small
    per_large = min(r.provider_seconds for r in runs[("xcesim", args.large)]) / args.large
    provider_ratio = (per_large * args.large) / (per_small * args.small) if per_small > 0 else float("nan")
    parts = [
        f"bench_sim_apply: apply {args.small}: {small.seconds:.1f} s, {args.large}: {large.seconds:.1f} s, "
        f"ratio {ratio:.2f} ({'ok' if ratio <= target else 'over'} target {target:.2f})"
    ]
    if not args.no_baseline:
        b_small, b_large = best("baseline", args.small), best("baseline", args.large)
        parts.append(
            f"terraform alone {b_small.seconds:.1f} s / {b_large.seconds:.1f} s, "
            f"ratio {b_large.seconds / b_small.seconds:.2f}"
        )
    provider_ok = provider_ratio <= target
    parts.append(
        f"provider {per_small * 1000:.1f} / {per_large * 1000:.1f} ms per instance, "
        f"ratio {provider_ratio:.2f} ({'ok' if provider_ok else 'over'})"
    )
    print("; ".join(parts))
    return 1 if args.check and not provider_ok else 0


if __name__ == "__main__":
    sys.exit(main())
