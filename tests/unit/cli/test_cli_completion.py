"""Shell completion (docs/cli.md, "Shell completion"): `xceprov completion SHELL` and click's variable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import xceprov_builtin


def _wrapper(tmp_path: Path) -> Path:
    """An ``xceprov`` on a private PATH that runs this checkout's command line (as the installed one does)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / "xceprov"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m orchestrator.cli "$@"\n')
    program.chmod(0o755)
    return bindir


@pytest.mark.parametrize(
    ("shell", "hook"),
    [
        ("bash", "complete -o nosort -F _xceprov_completion xceprov"),
        ("zsh", "compdef _xceprov_completion xceprov"),
        ("fish", "complete --no-files --command xceprov"),
    ],
)
def test_completion_prints_the_script_clicks_variable_gives(tmp_path: Path, shell: str, hook: str) -> None:
    verb = xceprov_builtin(tmp_path, "completion", shell)
    assert verb.returncode == 0, verb.stderr
    assert hook in verb.stdout
    # The documented alternative: click's own variable gives the same script.
    env = {**os.environ, "_XCEPROV_COMPLETE": f"{shell}_source"}
    direct = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli"], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout.strip() == verb.stdout.strip()


def test_completion_refuses_an_unknown_shell(tmp_path: Path) -> None:
    verb = xceprov_builtin(tmp_path, "completion", "tcsh")
    assert verb.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in verb.stderr
    assert "Traceback" not in verb.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_verbs_and_subverbs_with_the_printed_script(tmp_path: Path) -> None:
    bindir = _wrapper(tmp_path)
    script = tmp_path / "xceprov.bash"
    script.write_text(xceprov_builtin(tmp_path, "completion", "bash").stdout)

    def complete(*words: str) -> list[str]:
        # What bash does at a Tab: COMP_WORDS holds the line, COMP_CWORD the word being completed.
        line = " ".join(f"'{w}'" for w in words)
        program = (
            f'source "{script}"; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; '
            '_xceprov_completion xceprov; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
        done = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("xceprov", "comp") == ["completion"]
    assert "fault" in complete("xceprov", "sim", "")
    assert complete("xceprov", "completion", "z") == ["zsh"]
