"""The cost ledger (``xceprov cost``) against the simulated cloud's own bill (``xceprov sim
cloud bill``), after a small run through the real Terraform engine: instances launched, one op
destroyed (``returned``), one instance deleted behind Terraform's back and recorded ``lost`` by
the next apply, the rest live.

Live instances agree to the second (both start at the cloud's launch time, both end at the
period's end). A gone instance's end in the ledger is its fact's commit time, after the cloud
ended it: the ledger may count more, by at most the wall time of the command that recorded the
fact (docs/cost.md, "The limits"). What those allowances do not explain must be within 1 % of
the bill; otherwise the test fails with the differences itemised per instance.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import xceprov

from orchestrator.sim.cloud.store import CloudStore

pytestmark = pytest.mark.integration

# Prices as the cloud's catalogue has them, so both sides price alike.
SITE = """
cluster: itest
state_dir: state
standalone: true
controller: {ca: system}
providers:
  sim: {module: xcesim, max_instances: 20}
templates:
  cpu:
    xce: {host_groups: [batch, short]}
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}
  big:
    providers:
      sim: {flavor: c16.xlarge, image: debian-12, cost_per_hour: 0.68}
"""


def _json(site: Path, *args: str) -> dict[str, Any]:
    done = xceprov(site, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _timed(site: Path, *args: str) -> float:
    """Run a command that must succeed; its wall time."""
    began = time.time()
    done = xceprov(site, *args)
    assert done.returncode == 0, done.stderr
    return time.time() - began + 1.0  # + the launch time's whole second


def test_the_ledger_agrees_with_the_clouds_bill(tmp_path: Path) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    site = tmp_path
    _timed(site, "plan", "cpu=3", "big=1", "--out", "first")
    _timed(site, "apply", "first")
    cloud = CloudStore(site / "state" / "sim" / "cloud.sqlite")
    instances = cloud.list_instances()
    big = next(i for i in instances if i.flavor == "c16.xlarge")
    victim = next(i for i in instances if i.flavor == "c8.large")
    allowance: dict[str, float] = {}  # instance id → seconds the ledger may count more
    allowance[big.id] = _timed(site, "destroy", "--op", big.tags["xce:op_id"])
    cloud.delete_out_of_band(victim.id)
    # From the delete to the apply that records the loss (and launches one more).
    allowance[victim.id] = _timed(site, "plan", "cpu=1", "--out", "second") + _timed(site, "apply", "second")
    until = str(int(time.time()) + 5)  # a period that covers every instance's life so far

    ledger = _json(site, "cost", "--json", "--until", until, "--by", "group")
    bill = _json(site, "sim", "cloud", "bill", "--json", "--until", until)
    ours = {i["instance_id"]: i for i in ledger["instances"]}
    theirs = {i["instance_id"]: i for i in bill["instances"]}
    assert set(ours) == set(theirs) and len(ours) == 5

    lines, unexplained = [], 0.0
    for iid, billed in sorted(theirs.items()):
        counted = ours[iid]
        extra = counted["running_seconds"] - billed["running_seconds"]
        allowed = allowance.get(iid, 0.0)
        explained = min(max(extra, 0.0), allowed) * billed["cost"] / max(billed["running_seconds"], 1.0)
        unexplained += counted["cost"] - billed["cost"] - explained
        lines.append(
            f"{iid} {billed['flavor']}: ledger {counted['cost']:.6f} ({counted['running_seconds']:.0f} s), "
            f"bill {billed['cost']:.6f} ({billed['running_seconds']:.0f} s), allowed +{allowed:.1f} s"
        )
        assert extra >= -1e-6, "\n".join(lines)  # the ledger never counts less than the cloud bills
        if iid not in allowance:
            assert abs(extra) < 1e-6, "\n".join(lines)  # live: to the second
    total = bill["total"]["cost"]
    assert abs(unexplained) <= 0.01 * total, f"unexplained {unexplained:.6f} of {total:.6f}:\n" + "\n".join(lines)
    # Host groups: cpu's instances count under both of its groups, big's under none.
    assert ledger["groups_overlap"] is True
    assert ledger["totals"]["batch"] == ledger["totals"]["short"] > 0 and ledger["totals"]["-"] > 0
