"""Reports that tell the truth, through the command line in an empty directory (issue 16, part 5).

An orphan scan that could not read the controller is no all-clear (exit 11, the unread classes
named); a newcomer's first preview on the built-in configuration works before `xceprov sim up`;
`xceprov ops --json` says a provider never used has no state yet, and splits the cluster's listing
by provider (issue 27 item 9).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import xceprov, xceprov_builtin
from sim_controller_helpers import free_port

from orchestrator.sim.cloud.store import CloudStore

pytestmark = pytest.mark.integration


def site_with_unreachable_controller(tmp_path: Path) -> Path:
    (tmp_path / "xceprov.yaml").write_text(
        f"""
cluster: reports
state_dir: state
controller: {{ca: system, addresses: ["127.0.0.1:{free_port()}"], connect_timeout: 2s}}
providers:
  sim: {{module: xcesim}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""
    )
    return tmp_path


def test_an_orphan_scan_without_its_controller_is_no_all_clear(tmp_path: Path) -> None:
    site = site_with_unreachable_controller(tmp_path)
    text = xceprov(site, "orphans")
    assert text.returncode == 11, text.stderr
    assert "no orphans found" not in text.stdout and "Traceback" not in text.stderr
    assert "not an all-clear" in text.stdout
    assert text.stderr.splitlines() == [
        "xceprov: orphan scan incomplete, not an all-clear: classes not scanned: sim (a, b, c, e)"
    ]
    as_json = xceprov(site, "orphans", "--json")
    assert as_json.returncode == 11, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["complete"] is False and doc["unread"] == {"sim": ["a", "b", "c", "e"]}
    assert doc["controller"]["read"] is False and doc["findings"] == []


def test_a_newcomers_first_preview_works_on_the_built_in_configuration(tmp_path: Path) -> None:
    preview = xceprov_builtin(tmp_path, "plan", "cpu=20", "gpu=2", "--json")
    assert preview.returncode == 0, preview.stderr
    doc = json.loads(preview.stdout)
    assert doc["cluster"] == "demo" and sum(p["add"] for p in doc["providers"]) == 22
    [warning] = preview.stderr.splitlines()
    assert warning.startswith("warning: controller.ca ") and "file not found yet" in warning
    assert "built-in configuration is the simulated world's" in warning and "`xceprov sim up`" in warning
    assert "--config FILE" in warning and "apply needs it" in warning
    # The preview made no CA and no instance: `sim up` and `apply` still do that.
    assert not (tmp_path / ".xceprov" / "sim" / "tls").exists()
    assert CloudStore(tmp_path / ".xceprov" / "sim" / "cloud.sqlite").list_instances() == []
    table = xceprov_builtin(tmp_path, "plan", "cpu=1")
    assert table.returncode == 0 and "Burst preview, cluster demo" in table.stdout, table.stderr
    # validate agrees: a CA not made yet is a warning, not an error.
    checked = xceprov_builtin(tmp_path, "validate", "-q")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert any("file not found yet" in line and "`xceprov sim up`" in line for line in checked.stderr.splitlines())


def test_validate_and_plan_refuse_the_same_bad_ca_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n")
    (tmp_path / "xceprov.yaml").write_text(
        """
cluster: reports
state_dir: state
standalone: true
controller: {ca: ca.pem}
providers:
  sim: {module: xcesim}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12}
"""
    )
    refused = f"xceprov: controller.ca {tmp_path / 'ca.pem'}: holds a PRIVATE KEY block"
    preview = xceprov(tmp_path, "plan", "cpu=1")
    checked = xceprov(tmp_path, "validate", "-q")
    assert (preview.returncode, checked.returncode) == (3, 3), preview.stderr + checked.stderr
    # validate may warn first (a root with no provider lock); the refusal is one of its lines.
    assert preview.stderr.startswith(refused)
    assert [line for line in checked.stderr.splitlines() if refused in line], checked.stderr
    assert "Traceback" not in preview.stderr + checked.stderr


# Two providers of one cluster on one simulated cloud (the xcesim default store), standalone.
TWO_PROVIDERS = """
cluster: reports
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


def test_ops_says_a_provider_never_used_has_no_state_yet(tmp_path: Path) -> None:
    (tmp_path / "xceprov.yaml").write_text(TWO_PROVIDERS)
    before = xceprov(tmp_path, "ops", "--json")
    assert before.returncode == 0, before.stderr
    assert {p["provider"]: p["listing"] for p in json.loads(before.stdout)["providers"]} == {
        "sim": "no state yet",
        "spot": "no state yet",
    }
    for step in (("plan", "cpu=1", "--provider", "sim", "--out", "burst"), ("apply", "burst")):
        done = xceprov(tmp_path, *step)
        assert done.returncode == 0, done.stderr
    after = xceprov(tmp_path, "ops", "--json")
    assert after.returncode == 0, after.stderr
    providers = {p["provider"]: p for p in json.loads(after.stdout)["providers"]}
    assert (providers["sim"]["listing"], providers["spot"]["listing"]) == ("read", "no state yet")
    assert providers["sim"]["untracked"] == [] and providers["sim"]["open"] == []


def test_ops_lists_neither_provider_s_instances_as_untracked_for_the_other(tmp_path: Path) -> None:
    """The modules list the cloud by the cluster's tag, so the listing read for one provider holds
    the other's instances too: they are that provider's, with its facts, never untracked here. A
    stray tagged for a provider stays untracked under that provider alone."""
    (tmp_path / "xceprov.yaml").write_text(TWO_PROVIDERS)
    for provider in ("sim", "spot"):
        for step in (("plan", "cpu=1", "--provider", provider, "--out", provider), ("apply", provider)):
            done = xceprov(tmp_path, *step)
            assert done.returncode == 0, done.stderr
    cloud = CloudStore(tmp_path / "state" / "sim" / "cloud.sqlite")
    assert {i.tags["xce:provider"] for i in cloud.list_instances()} == {"sim", "spot"}  # one cloud, both
    stray = cloud.create_out_of_band(
        "stray", "c8.large", "debian-12", {"xce:cluster": "reports", "xce:provider": "spot", "xce:op_id": "op-by-hand"}
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
