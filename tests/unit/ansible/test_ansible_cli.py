"""``xceprov bootstrap``: thin over the service; results printed, exit code 1 on a failed host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.clients.ansible.runner import HostResult, RunResult
from orchestrator.model.progress import HostDone, PhaseEnded, PhaseStarted, TaskDone


@pytest.mark.parametrize("verbose", [False, True])
def test_bootstrap_verb_calls_the_service(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, verbose: bool) -> None:
    calls: dict[str, Any] = {}

    def fake(loaded: Any, root: Path, **kw: Any) -> RunResult:
        calls.update(kw)
        kw["progress"](PhaseStarted("bootstrap", "", 2))
        kw["progress"](TaskDone("h1", "Write the node manager configuration", "changed"))
        kw["progress"](HostDone("bootstrap", "", "h2", "failed", "at task 'Site hook': site says no"))
        kw["progress"](HostDone("bootstrap", "", "h1", "changed"))
        kw["progress"](PhaseEnded("bootstrap", ""))
        return RunResult(
            "id",
            "failed",
            2,
            tmp_path,
            {
                "h1": HostResult("h1", "changed", ok=3, changed=1),
                "h2": HostResult("h2", "failed", task="Site hook", message="site says no"),
            },
        )

    monkeypatch.setattr("orchestrator.services.bootstrap.bootstrap", fake)
    monkeypatch.setattr("orchestrator.paths.toolkit_root", lambda: tmp_path)
    cfg = tmp_path / "xceprov.yaml"  # no simulated provider: nothing of the simulated world is touched
    cfg.write_text(
        "cluster: t\ncontroller: {ca: system}\nproviders: {aws: {module: aws}}\n"
        "templates: {cpu: {providers: {aws: {flavor: a, image: b}}}}\n"
    )
    flags = ["-v"] if verbose else []
    out = CliRunner().invoke(
        cli, [*flags, "--config", str(cfg), "bootstrap", "-e", "a=1", "-e", "b=[1,2]", "-e", "c=x", "h1", "h2"]
    )
    assert out.exit_code == 1, out.output
    # One line per host on stdout; the progress (not a terminal here: plain lines) on stderr.
    assert out.stdout.splitlines()[:2] == [
        "h1: changed (ok=3 changed=1)",
        "h2: failed at task 'Site hook': site says no",
    ]
    assert "bootstrap: 1/2 hosts done, 1 failed" in out.stderr.splitlines()
    # Per-task lines only with -v.
    assert ("Write the node manager configuration" in out.stderr) is verbose
    assert calls["hosts"] == ("h1", "h2") and calls["op"] is None and calls["playbook"] == "bootstrap"
    assert calls["extra_vars"] == {"a": 1, "b": [1, 2], "c": "x"}
    # The verb only hands over the simulated world's parts; the service decides whether they apply.
    world = calls["world"]
    assert world.sources.name == "nodemanager" and world.toolkit_key(tmp_path) == tmp_path / "ssh" / "id_ed25519"


def test_op_and_hosts_together_is_a_usage_error() -> None:
    out = CliRunner().invoke(cli, ["bootstrap", "--op", "op1", "h1"])
    assert out.exit_code == 2 and "either --op or host names" in out.output
