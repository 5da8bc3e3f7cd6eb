"""The memory of refusals as a user sees it: ``xceprov status`` (text and ``--json``) from the
daemon's status file, with the daemon's own or no controller, and the metrics from the same
document (docs/daemon.md, "The memory of refusals")."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.statusdoc import build_document, update_metrics
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.services.status import offline_json, offline_state
from orchestrator.services.status_text import render_offline
from orchestrator.workspace.daemonstatus import write_status
from orchestrator.workspace.documents import LocalDocuments
from tests.unit.daemon.test_daemon_statusdoc import samples

SITE = """
cluster: site1
state_dir: {state}
controller: {{ca: system}}
providers:
  aws: {{module: xcesim}}
templates:
  cpu:
    providers:
      aws: {{flavor: c8, image: deb}}
"""


def site(tmp_path: Path) -> LoadedConfig:
    return parse_config(SITE.format(state=tmp_path / "state"), "xceprov.yaml", tmp_path)


def written(loaded: LoadedConfig, now: float) -> dict[str, object]:
    """The status file a running daemon writes with a capacity hold ended and a quota held."""
    config = loaded.config
    memory = RefusalMemory.load(LocalDocuments(config.state_dir), config.policy, random.Random(3))
    memory.refused("aws", "c8@a", "capacity", "InsufficientInstanceCapacity: no c8 in a", now - 600)
    memory.refused("aws", "", "quota", "InstanceLimitExceeded: 0 more\ninstances", now - 5)
    doc = build_document(
        daemon={"pid": os.getpid(), "state": "running", "reconcile_interval": 30, "host": "h"},
        report=None,
        leases=[],
        breakers=Breakers.load(config.state_dir, config.policy.breaker),
        facts={"aws": []},
        hosts=[],
        now=now,
        config=config,
        refusals=memory,
    )
    write_status(config.state_dir, doc)
    return doc


def test_status_shows_what_is_held_until_when_in_text_and_json(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    now = time.time()
    written(loaded, now)
    local = offline_state(loaded)
    doc = json.loads(json.dumps(offline_json("controller unreachable", local)))
    rows = {(r["scope"], r["placement"]): r for r in doc["refusals"]}
    quota, capacity = rows[("quota", "")], rows[("capacity", "c8@a")]
    assert quota["provider"] == "aws" and quota["failures"] == 1 and quota["until"] > now
    assert quota["text"] == "InstanceLimitExceeded: 0 more instances"  # one line
    assert capacity["until"] < now  # its hold ended: probed again
    assert doc["daemon"]["refusals"] == doc["refusals"]
    text = render_offline("controller unreachable", local, ["aws"])
    [quota_line] = [line for line in text.splitlines() if line.startswith("  QUOTA")]
    assert "aws/*" in quota_line and "held until" in quota_line and "InstanceLimitExceeded" in quota_line
    [capacity_line] = [line for line in text.splitlines() if line.startswith("  CAPACITY")]
    assert "aws/c8@a" in capacity_line and "hold ended: asked again" in capacity_line


def test_the_metrics_of_the_memory_follow_the_status_document(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    now = 2_000_000_000.0
    doc = written(loaded, now)
    metrics = DaemonMetrics()
    update_metrics(metrics, doc, loaded.config, pass_duration=None)
    got = samples(metrics)
    held = "xceprov_offering_held_until_seconds"
    quota = (held, (("placement", ""), ("provider", "aws"), ("scope", "quota")))
    capacity = (held, (("placement", "c8@a"), ("provider", "aws"), ("scope", "capacity")))
    assert got[quota] > now and got[capacity] == 0
    # The quota cleared (an instance of the provider went): its series goes.
    update_metrics(
        metrics, {**doc, "refusals": [r for r in doc["refusals"] if r["scope"] != "quota"]}, loaded.config, None
    )  # type: ignore[attr-defined]
    got = samples(metrics)
    assert quota not in got and got[capacity] == 0
