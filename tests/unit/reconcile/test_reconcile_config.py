"""The policy keys: documented defaults, durations, and one line per bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError

BASE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim}
templates:
  cpu: {providers: {sim: {flavor: c8, image: deb}}}
"""


def test_defaults() -> None:
    config = parse_config(BASE, "site.yaml", Path("/")).config
    policy = config.policy
    assert (policy.budget_per_hour, policy.cooldown, policy.lifetime_lead) == (None, 30.0, 3600.0)
    assert (policy.retry.base, policy.retry.max, policy.retry.attempts) == (10.0, 600.0, 5)
    assert (policy.breaker.failures, policy.breaker.window, policy.breaker.cool_off) == (3, 1800.0, 3600.0)
    assert config.providers["sim"].budget_per_hour is None
    assert config.templates["cpu"].providers["sim"].max_instances is None


def test_values_with_units() -> None:
    text = BASE + "policy: {cooldown: 2m, budget_per_hour: 12.5, retry: {base: 5s, max: 1h}, breaker: {cool_off: 2h}}\n"
    policy = parse_config(text, "site.yaml", Path("/")).config.policy
    assert (policy.cooldown, policy.budget_per_hour, policy.retry.max, policy.breaker.cool_off) == (
        120.0,
        12.5,
        3600.0,
        7200.0,
    )


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("policy: {coldown: 10}\n", "policy.coldown"),
        ("policy: {budget_per_hour: -1}\n", "policy.budget_per_hour"),
        ("policy: {retry: {base: 0}}\n", "policy.retry"),
        ("policy: {breaker: {failures: 0}}\n", "policy.breaker.failures"),
    ],
)
def test_bad_values_name_their_key(extra: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + extra, "site.yaml", Path("/"))
    assert any(line.startswith("site.yaml: ") and needle in line for line in info.value.problems), info.value.problems
