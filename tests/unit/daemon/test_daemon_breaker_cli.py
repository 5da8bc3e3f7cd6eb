"""``xceprov breaker reset TEMPLATE``: closes the breaker in its durable file, audited; a typo is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.model.config import BreakerSettings
from orchestrator.reconcile.breaker import Breakers, Position

SITE = """
cluster: t
state_dir: {state}
controller: {{ca: system}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}
  gpu: {{providers: {{sim: {{flavor: g4.large, image: debian-12}}}}}}
"""


def site(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    cfg = tmp_path / "xceprov.yaml"
    cfg.write_text(SITE.format(state=state))
    return cfg, state


def audit(state: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (state / "audit.log").read_text().splitlines()]


def test_reset_closes_an_open_breaker_and_audits_what_it_was(tmp_path: Path) -> None:
    cfg, state = site(tmp_path)
    breakers = Breakers.load(state, BreakerSettings())
    now = time.time()
    for _ in range(3):
        breakers.failure("gpu", "bootstrap", "ssh: connection refused", now)
    breakers.failure("cpu", "join", "never joined", now)
    assert not breakers.allows("gpu", now)

    result = CliRunner().invoke(cli, ["--config", str(cfg), "breaker", "reset", "gpu"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("breaker of gpu: reset (was open, 3 failures: 3 bootstrap failures within 1800s")
    again = Breakers.load(state, BreakerSettings())
    assert again.state("gpu").position == Position.CLOSED and again.allows("gpu", now)
    assert again.state("cpu").failures  # the other template's record is untouched
    [entry] = [e for e in audit(state) if e["action"] == "breaker-reset"]
    assert entry["template"] == "gpu"
    assert entry["before"]["position"] == "open" and entry["before"]["failures"] == 3  # type: ignore[index]


def test_reset_of_a_closed_breaker_says_so(tmp_path: Path) -> None:
    cfg, _state = site(tmp_path)
    result = CliRunner().invoke(cli, ["--config", str(cfg), "breaker", "reset", "cpu"])
    assert result.exit_code == 0
    assert result.stdout == "breaker of cpu: already closed, no failures recorded\n"


def test_unknown_template_is_one_line_naming_it_and_changes_nothing(tmp_path: Path) -> None:
    cfg, state = site(tmp_path)
    result = CliRunner().invoke(cli, ["--config", str(cfg), "breaker", "reset", "gpuu"])
    assert result.exit_code == 2  # a usage error
    assert result.stderr == f"xceprov: {cfg}: templates.gpuu: no such template (known: cpu, gpu); nothing reset\n"
    assert result.stdout == ""
    assert not (state / "breakers.json").exists() and not (state / "audit.log").exists()


def test_a_running_daemons_copy_sees_the_reset_and_never_undoes_it(tmp_path: Path) -> None:
    cfg, state = site(tmp_path)
    now = time.time()
    daemon_copy = Breakers.load(state, BreakerSettings(failures=1))  # held by the daemon's reconciler
    daemon_copy.failure("gpu", "bootstrap", "unreachable", now)
    assert not daemon_copy.allows("gpu", now)
    result = CliRunner().invoke(cli, ["--config", str(cfg), "breaker", "reset", "gpu"])
    assert result.exit_code == 0, result.output
    # The daemon's next look reads the file again: gpu is allowed...
    assert daemon_copy.allows("gpu", now)
    # ...and its next record (another template's failure) keeps the reset instead of writing gpu back.
    daemon_copy.failure("cpu", "join", "never joined", now)
    on_disk = Breakers.load(state, BreakerSettings(failures=1))
    assert on_disk.allows("gpu", now) and not on_disk.allows("cpu", now)
    # The operator removed the file (documented: closes every breaker): the daemon follows.
    (state / "breakers.json").unlink()
    assert daemon_copy.allows("cpu", now) and daemon_copy.states() == []
