"""Turning TEMPLATE=N into ops: provider choice, granularity, limits, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.offerings import Placement
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.policy import choose_ops, parse_requests

SITE = """
cluster: site1
controller: {ca: system}
providers:
  onprem: {module: xcesim, priority: 20, max_instances: 4}
  cloud: {module: xcesim, priority: 10, max_instances: 100, granularity: 4}
templates:
  cpu:
    providers:
      onprem: {flavor: small, image: deb}
      cloud: {flavor: c8, image: deb}
  gpu:
    providers:
      cloud: {flavor: g4, image: deb}
"""


def op(template: str, provider: str, count: int, asked: int, offering: str) -> OpRequest:
    return OpRequest(template, provider, count, asked, (Placement(offering, count),))


@pytest.fixture
def config() -> Config:
    return parse_config(SITE, "site.yaml", Path("/")).config


def test_parse_requests() -> None:
    assert parse_requests(["cpu=20", "gpu=2", "cpu=1"]) == {"cpu": 21, "gpu": 2}
    with pytest.raises(UsageError, match="expected TEMPLATE=COUNT"):
        parse_requests(["cpu"])


def test_highest_priority_with_room_wins_then_spills(config: Config) -> None:
    assert choose_ops(config, {"cpu": 3}, None, {}) == [op("cpu", "onprem", 3, 3, "small")]
    # onprem has 2 of 4 in use: 3 more do not fit, the next provider takes them, rounded up.
    assert choose_ops(config, {"cpu": 3}, None, {"onprem": 2}) == [op("cpu", "cloud", 4, 3, "c8")]


def test_explicit_provider(config: Config) -> None:
    assert choose_ops(config, {"cpu": 1}, "cloud", {}) == [op("cpu", "cloud", 4, 1, "c8")]
    with pytest.raises(UsageError, match="no such provider"):
        choose_ops(config, {"cpu": 1}, "nowhere", {})
    with pytest.raises(UsageError, match="template 'gpu' has no provider 'onprem'"):
        choose_ops(config, {"gpu": 1}, "onprem", {})


def test_all_problems_at_once(config: Config) -> None:
    with pytest.raises(UsageError) as info:
        choose_ops(config, {"tpu": 1, "cpu": 0, "gpu": 500}, None, {})
    lines = str(info.value).splitlines()
    assert lines == [
        "tpu=1: unknown template 'tpu' (known: cpu, gpu)",
        "cpu=0: count must be a positive number",
        "gpu=500: beyond every provider's max_instances (cloud: 0 of max_instances 100)",
    ]
