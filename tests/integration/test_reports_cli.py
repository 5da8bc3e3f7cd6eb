"""Reports that tell the truth, through the command line in an empty directory (issue 16, part 5).

An orphan scan that could not read the controller is no all-clear (exit 11, the unread classes
named); a newcomer's first preview on the built-in configuration works before `xceprov sim up`;
`xceprov ops --json` says a provider never used has no state yet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import xceprov
from sim_controller_helpers import free_port

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
        "xceprov: orphan scan incomplete, not an all-clear: classes not scanned: sim (a, b, c)"
    ]
    as_json = xceprov(site, "orphans", "--json")
    assert as_json.returncode == 11, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["complete"] is False and doc["unread"] == {"sim": ["a", "b", "c"]}
    assert doc["controller"]["read"] is False and doc["findings"] == []
