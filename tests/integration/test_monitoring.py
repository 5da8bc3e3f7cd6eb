"""The shipped alert rules (contrib/prometheus) as Prometheus reads them: `promtool check rules`
accepts them and `promtool test rules` runs their unit tests (each alert fires on its series and
stays silent on a healthy daemon's). That the metrics they name are exposed is tested against a
running daemon in test_daemon.py; that each alert has both tests, in tests/unit/contrib."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.monitoring_helpers import RULE_TESTS, RULES, alert_rules

pytestmark = pytest.mark.integration


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool is not installed (Debian: apt-get install prometheus; scripts/setup-env.sh does it as root)"
        )
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def test_promtool_accepts_every_shipped_alert_rule() -> None:
    checked = run("check", "rules", RULES.name, cwd=RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout, checked.stdout


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    tested = run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_rule_that_does_not_fire_as_tested_fails_the_promtool_tests(tmp_path: Path) -> None:
    """The unit tests can fail: with the link-down alert inverted, promtool reports it."""
    (tmp_path / RULES.name).write_text(
        RULES.read_text().replace("expr: xceprov_controller_link_up == 0", "expr: xceprov_controller_link_up == 1")
    )
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    tested = run("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0 and "XceprovControllerLinkDown" in tested.stdout + tested.stderr
