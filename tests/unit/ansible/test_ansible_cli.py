"""``xceprov bootstrap``: thin over the service; results printed, exit code 1 on a failed host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.clients.ansible.runner import HostResult, RunResult
from orchestrator.model.progress import HostDone, PhaseEnded, PhaseStarted, TaskDone


def _site(tmp_path: Path) -> Path:
    cfg = tmp_path / "xceprov.yaml"  # no simulated provider: nothing of the simulated world is touched
    cfg.write_text(
        "cluster: t\ncontroller: {ca: system}\nproviders: {aws: {module: aws}}\n"
        "templates: {cpu: {providers: {aws: {flavor: a, image: b}}}}\n"
    )
    return cfg


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
    cfg = _site(tmp_path)
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


# Issue 27 item 21: `apply --bootstrap` exited 0 where `xceprov bootstrap` exits 1 for the same play.
PLAY_OUTCOMES = {
    "a host failed": ({"h1": ("changed", None), "h2": ("failed", "site says no")}, 1),
    "a host unreachable": ({"h1": ("ok", None), "h2": ("unreachable", "no route to host")}, 1),
    "every host bootstrapped": ({"h1": ("changed", None), "h2": ("ok", None)}, 0),
}


@pytest.mark.parametrize("case", sorted(PLAY_OUTCOMES))
def test_apply_bootstrap_exits_as_bootstrap_does_for_the_same_play(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
) -> None:
    from orchestrator.ops.executor.results import Created, CreateResult
    from orchestrator.services.apply import AppliedProvider
    from orchestrator.services.ops import playbook_callables

    outcomes, code = PLAY_OUTCOMES[case]
    hosts = {name: HostResult(name, status, task="Site hook", message=why) for name, (status, why) in outcomes.items()}
    monkeypatch.setattr(
        "orchestrator.services.bootstrap.bootstrap", lambda *_a, **_k: RunResult("id", "x", 2, tmp_path, hosts)
    )

    def apply_bundle(loaded: Any, _bundle: Path, root: Path, **kw: Any) -> list[AppliedProvider]:
        """The op created h1 and h2; the bootstrap outcome is the real callable's, of the play above."""
        assert kw["bootstrap"]
        boot = playbook_callables(loaded, root, kw["world"], kw["progress"])[0]
        made = [Created(f"op1-{n}", f"i-{n}", name, f"10.0.0.{n}", "cpu", 0.0) for n, name in enumerate(hosts)]
        op = CreateResult("op1", "aws", "cpu", made, dict(boot("aws", made)))
        return [AppliedProvider("aws", {c.key: {} for c in made}, (op,))]

    monkeypatch.setattr("orchestrator.services.apply.apply_bundle", apply_bundle)
    monkeypatch.setattr("orchestrator.paths.toolkit_root", lambda: tmp_path)
    cfg = _site(tmp_path)

    by_hand = CliRunner().invoke(cli, ["--config", str(cfg), "bootstrap", "-q", "h1", "h2"])
    applied = CliRunner().invoke(cli, ["--config", str(cfg), "apply", "-q", "--bootstrap", str(tmp_path / "bundle")])
    assert (by_hand.exit_code, applied.exit_code) == (code, code), applied.output
    assert "  op1-1  i-1  h2  10.0.0.1  bootstrap " in applied.stdout  # each host's outcome is still shown
    if code:
        assert applied.stderr.splitlines()[-1] == (
            "xceprov: bootstrap failed on 1 of 2 new hosts (h2); the instances are kept: "
            "xceprov bootstrap --op op1 runs the play on them again"
        )
    else:
        assert applied.stderr == ""


def test_an_extra_var_nested_too_deep_for_json_is_passed_as_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Was ``internal error: RecursionError`` (exit 70): JSON that does not parse is text, as documented."""
    seen: dict[str, Any] = {}

    def fake(_loaded: Any, _root: Path, **kw: Any) -> RunResult:
        seen.update(kw["extra_vars"])
        return RunResult("id", "successful", 0, tmp_path, {"h1": HostResult("h1", "ok")})

    monkeypatch.setattr("orchestrator.services.bootstrap.bootstrap", fake)
    monkeypatch.setattr("orchestrator.paths.toolkit_root", lambda: tmp_path)
    deep = "[" * 100_000
    out = CliRunner().invoke(cli, ["--config", str(_site(tmp_path)), "bootstrap", "-q", "-e", f"a={deep}", "h1"])
    assert out.exit_code == 0, out.output
    assert seen == {"a": deep}


def test_an_ops_bootstrap_mints_each_hosts_token_to_its_join_deadline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.configfile import load_config
    from orchestrator.ops.executor.results import Created
    from orchestrator.services.ops import playbook_callables

    seen: dict[str, Any] = {}

    def play(*_a: Any, **kw: Any) -> RunResult:
        seen.update(kw)
        return RunResult("id", "x", 2, tmp_path, {"h1": HostResult("h1", "changed")})

    monkeypatch.setattr("orchestrator.services.bootstrap.bootstrap", play)
    boot = playbook_callables(load_config(_site(tmp_path)), tmp_path)[0]
    boot("aws", [Created("op1-0", "i-0", "h1", "10.0.0.1", "cpu", 1_800_000_600.5)])
    # The op's expectedHost deadline reaches the tokens file (services/join_tokens.py).
    assert seen["join_deadlines"] == {"op1-0": 1_800_000_600.5}
