"""docs/cli.md carries the ``--help`` of every command as ``scripts/cli_reference.py`` writes it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "cli_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_holds_the_current_help_of_every_command() -> None:
    generator = _generator()
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert generator.updated(current) == current, "docs/cli.md is stale: run .venv/bin/python scripts/cli_reference.py"


def test_regenerating_keeps_the_prose_around_the_generated_part() -> None:
    generator = _generator()
    stale = f"# Title\n\nProse before.\n\n{generator.BEGIN}\nold help\n{generator.END}\n\nProse after.\n"
    fresh = generator.updated(stale)
    assert fresh.startswith("# Title\n\nProse before.\n\n" + generator.BEGIN)
    assert "old help" not in fresh
    assert fresh.endswith(generator.END + "\n\nProse after.\n")
    assert "### `xceprov completion`" in fresh


def test_check_mode_fails_on_a_stale_document_and_writes_nothing(tmp_path: Path) -> None:
    # The script as the lead runs it (`--check`), against a copy whose reference lost a verb.
    copy = tmp_path / "repo"
    (copy / "docs").mkdir(parents=True)
    (copy / "scripts").mkdir()
    (copy / "scripts" / "cli_reference.py").write_text(SCRIPT.read_text())
    stale = (ROOT / "docs" / "cli.md").read_text().replace("### `xceprov validate`", "### `xceprov gone`")
    (copy / "docs" / "cli.md").write_text(stale)
    done = subprocess.run(
        [sys.executable, str(copy / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "docs/cli.md is stale: run scripts/cli_reference.py" in done.stderr
    assert (copy / "docs" / "cli.md").read_text() == stale
