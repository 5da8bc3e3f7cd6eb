"""A failed Terraform command is the state backend's outage only when the backend does not answer."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from orchestrator.clients.terraform.engine import BinaryEngine
from orchestrator.errors import StoreUnavailable, TerraformError

FAKE = """#!{python}
import json, sys
if {rc} == 1:
    print(json.dumps({{"type": "diagnostic", "diagnostic": {{"severity": "error",
          "summary": "Error releasing the state lock", "detail": "please call the force-unlock command"}}}}))
print(json.dumps({{"type": "change_summary", "changes": {{"add": 1, "change": 0, "remove": 0}}}}))
sys.exit({rc})
"""


def fake(tmp_path: Path, rc: int) -> str:
    exe = tmp_path / "terraform"
    exe.write_text(FAKE.format(python=sys.executable, rc=rc))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_a_failure_while_the_backend_is_away_is_store_unavailable(tmp_path: Path) -> None:
    engine = BinaryEngine(fake(tmp_path, 1), backend_probe=lambda: "shared store: connect failed: refused")
    (tmp_path / "errored.tfstate").write_text("{}")
    with pytest.raises(StoreUnavailable) as away:
        engine.apply(tmp_path, plan_file=Path("p.tfplan"))
    message = str(away.value)
    assert away.value.exit_code == 75 and "force-unlock" not in message and "\n" not in message
    assert "connect failed: refused" in message and str(tmp_path / "errored.tfstate") in message


def test_a_failure_while_the_backend_answers_stays_terraforms(tmp_path: Path) -> None:
    engine = BinaryEngine(fake(tmp_path, 1), backend_probe=lambda: None)
    with pytest.raises(TerraformError) as failed:
        engine.apply(tmp_path, plan_file=Path("p.tfplan"))
    assert not isinstance(failed.value, StoreUnavailable)


def test_a_plan_with_changes_is_no_failure_and_asks_nobody(tmp_path: Path) -> None:
    asked: list[bool] = []

    def probe() -> str:
        asked.append(True)
        return "away"

    engine = BinaryEngine(fake(tmp_path, 2), backend_probe=probe)
    assert engine.plan(tmp_path).summary.add == 1  # -detailed-exitcode: 2 is "changes present"
    assert asked == []
