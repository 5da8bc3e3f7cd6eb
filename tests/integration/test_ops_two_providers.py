"""Two providers of one cluster on one cloud: each provider's ``xceprov ops`` shows its own.

The provider modules list the cloud by the cluster's tag (``xce:cluster``), so the listing read
for one provider holds the other provider's instances too. They are that provider's, with its
facts: ``xceprov ops`` splits the listing by ``xce:provider`` and never calls them untracked
here. A stray tagged for a provider stays untracked under that provider alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.sim.cloud.store import CloudStore

pytestmark = pytest.mark.integration

SITE = """
cluster: twoprov
state_dir: state
standalone: true
controller: {ca: system}
providers:
  sim: {module: xcesim}
  spot: {module: xcesim}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12}
      spot: {flavor: c8.large, image: debian-12}
"""


def test_ops_lists_neither_provider_s_instances_as_untracked_for_the_other(tmp_path: Path) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    for provider in ("sim", "spot"):
        for step in (("plan", "cpu=1", "--provider", provider, "--out", provider), ("apply", provider)):
            done = xceprov(tmp_path, *step)
            assert done.returncode == 0, done.stderr
    cloud = CloudStore(tmp_path / "state" / "sim" / "cloud.sqlite")
    assert {i.tags["xce:provider"] for i in cloud.list_instances()} == {"sim", "spot"}  # one cloud, both
    stray = cloud.create_out_of_band(
        "stray", "c8.large", "debian-12", {"xce:cluster": "twoprov", "xce:provider": "spot", "xce:op_id": "op-by-hand"}
    )

    listed = xceprov(tmp_path, "ops", "--json")
    assert listed.returncode == 0, listed.stderr
    providers = {p["provider"]: p for p in json.loads(listed.stdout)["providers"]}
    assert (providers["sim"]["listing"], providers["spot"]["listing"]) == ("read", "read")
    assert providers["sim"]["untracked"] == []
    assert providers["spot"]["untracked"] == [f"{stray.id} (cloud, op op-by-hand)"]

    text = xceprov(tmp_path, "ops")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        "sim: no open ops",
        f"spot: untracked {stray.id} (cloud, op op-by-hand) (no fact; the orphan scan decides)",
    ]
