"""``xceprov offerings``: a template's ``select:`` read from the simulated cloud's flavor
catalogue through the real Terraform engine and the ``xcesim_flavors`` data source."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from cli_run import xceprov

pytestmark = pytest.mark.integration

SITE = """
cluster: itest
state_dir: state
standalone: true
controller: {ca: system}
providers:
  sim: {module: xcesim, priority: 20}
  cheap: {module: xcesim, priority: 10, catalogue_ttl: 1h}
templates:
  cpu:
    xce: {slots: 8}
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}
      cheap:
        image: debian-12
        select: {cpus: {min: 8, max: 16}, memory_gb: {max: 64}, gpus: {max: 0}, zones: [b, c], slots: cpus, limit: 2}
  gpu:
    providers:
      cheap: {image: debian-12, select: {gpus: {min: 1}}}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    return tmp_path


def _offerings(site: Path, *args: str) -> dict[str, Any]:
    done = xceprov(site, "offerings", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _listed(doc: dict[str, Any], template: str, provider: str) -> list[tuple[str, float, int]]:
    [entry] = [t for t in doc["templates"] if t["template"] == template]
    [prov] = [p for p in entry["providers"] if p["provider"] == provider]
    return [(o["offering"], o["cost_per_hour"], o["slots"]) for o in prov["offerings"]]


def test_select_reads_the_catalogue_through_terraform_and_keeps_it_for_the_ttl(site: Path) -> None:
    doc = _offerings(site)
    [cpu, _gpu] = doc["templates"]
    # Providers in the policy's order: highest priority first.
    assert [p["provider"] for p in cpu["providers"]] == ["sim", "cheap"]
    assert _listed(doc, "cpu", "sim") == [("c8.large", 0.34, 8)]
    cheap = cpu["providers"][1]
    assert (cheap["way"], cheap["problem"], cheap["catalogue"]["flavors"]) == ("select", None, 7)
    # 8-16 cpus, at most 64 GB, no GPU, in zones b and c: the two cheapest per cpu, each in the
    # listed zones it is offered in (c8.large.spot is in a and b only).
    assert _listed(doc, "cpu", "cheap") == [
        ("c8.large.spot@b", 0.11, 8),
        ("c16.xlarge@b", 0.68, 16),
        ("c16.xlarge@c", 0.68, 16),
    ]
    assert {o["source"] for o in cheap["offerings"]} == {"catalogue"}
    assert [o["order"] for o in cheap["offerings"]] == [1, 2, 3]
    assert _listed(doc, "gpu", "cheap") == [("g4.xlarge", 3.06, 1)]
    # The catalogue's working directory is private, whatever modes Terraform gave its files.
    workdir = site / "state" / "catalogue" / "itest" / "cheap"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in workdir.iterdir()}
    assert modes.pop(".terraform") == 0o700 and set(modes.values()) == {0o600}, modes
    assert {"flavors.json", "terraform.tfstate", "main.tf"} <= set(modes)

    # The cloud's catalogue changes: the kept one serves until its TTL or a refresh.
    done = xceprov(site, "sim", "cloud", "flavor", "set", "c12.odd", "--cpus", "12", "--memory-gb", "48",
                   "--cost", "0.12", "--zone", "c")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _listed(_offerings(site, "cpu"), "cpu", "cheap")[0][0] == "c8.large.spot@b"
    refreshed = _offerings(site, "cpu", "--refresh")
    assert [t["template"] for t in refreshed["templates"]] == ["cpu"]
    assert _listed(refreshed, "cpu", "cheap") == [("c12.odd@c", 0.12, 12), ("c8.large.spot@b", 0.11, 8)]

    # A flavor without a price and no cost_per_cpu_hour: that pair has no offering, and says why.
    done = xceprov(site, "sim", "cloud", "flavor", "set", "g8.free", "--cpus", "8", "--memory-gb", "64", "--gpus", "1")
    assert done.returncode == 0, done.stderr
    gpu_doc = _offerings(site, "gpu", "--refresh")
    [prov] = gpu_doc["templates"][0]["providers"]
    assert prov["offerings"] == [] and "flavor g8.free" in prov["problem"] and "cost_per_cpu_hour" in prov["problem"]
    text = xceprov(site, "offerings", "gpu")
    assert text.returncode == 0 and "no offering: flavor g8.free" in text.stdout


def test_an_unknown_template_is_one_line(site: Path) -> None:
    done = xceprov(site, "offerings", "nope")
    assert done.returncode == 2
    assert done.stderr.strip() == "xceprov: no template named 'nope' (known: cpu, gpu)"


def test_plan_and_apply_launch_a_select_template_on_its_cheapest_offering(site: Path) -> None:
    planned = xceprov(site, "plan", "cpu=2", "--provider", "cheap", "--json")
    assert planned.returncode == 0, planned.stderr
    [prov] = json.loads(planned.stdout)["providers"]
    assert prov["cost_by_offering"] == {"cpu": {"c8.large.spot@b": pytest.approx(0.22)}}
    assert {i["tags"]["xce:offering"] for i in prov["instances"]} == {"c8.large.spot@b"}
    assert xceprov(site, "plan", "cpu=2", "--provider", "cheap", "--out", "burst").returncode == 0
    applied = xceprov(site, "apply", "burst")
    assert applied.returncode == 0, applied.stderr
    listed = json.loads(xceprov(site, "sim", "cloud", "list", "--json").stdout)["instances"]
    assert sorted((i["flavor"], i["zone"], i["tags"]["xce:offering"]) for i in listed) == [
        ("c8.large.spot", "b", "c8.large.spot@b"),
        ("c8.large.spot", "b", "c8.large.spot@b"),
    ]
    # A selection nothing matches: the policy finds no offering (exit 2, as a request no provider takes).
    (site / "xceprov.yaml").write_text(SITE.replace("gpus: {min: 1}", "gpus: {min: 99}"))
    refused = xceprov(site, "plan", "gpu=1")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == "xceprov: gpu=1: no offering of template 'gpu' on cheap"
    # A match the catalogue gives no price for: one line naming the select and the flavor (exit 3).
    (site / "xceprov.yaml").write_text(SITE)
    done = xceprov(site, "sim", "cloud", "flavor", "set", "g1.free", "--cpus", "4", "--memory-gb", "16", "--gpus", "1")
    assert done.returncode == 0, done.stderr
    assert xceprov(site, "offerings", "--refresh").returncode == 0  # the kept catalogue, read again
    unpriced = xceprov(site, "plan", "gpu=1")
    assert unpriced.returncode == 3, unpriced.stderr
    assert unpriced.stderr.strip() == (
        "xceprov: templates.gpu.providers.cheap.select: no offering: flavor g1.free matches but the "
        "catalogue gives no price for it: set select.cost_per_cpu_hour"
    )
