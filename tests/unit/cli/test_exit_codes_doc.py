"""docs/exit-codes.md lists every exit code the command line can end with, and --help names it."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

from orchestrator import errors
from orchestrator.cli.main import EXIT_CODES_DOC

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / EXIT_CODES_DOC


def table_rows() -> dict[int, str]:
    """Exit code → its table row."""
    rows: dict[int, str] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1].isdigit():
            code = int(cells[1])
            assert code not in rows, f"exit code {code} has two rows"
            rows[code] = line
    return rows


def literal_exits(package: Path) -> set[int]:
    """The codes of every ``sys.exit(N)`` and ``exit_process(N)`` with a literal N in ``package``."""
    codes: set[int] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
                in ("exit", "exit_process")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, int)
            ):
                codes.add(node.args[0].value)
    return codes


def test_every_error_class_is_in_the_table_with_its_code() -> None:
    rows = table_rows()
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.XceprovError)]
    assert errors.ScanIncomplete in classes and errors.LeaseHeld in classes
    for cls in classes:
        row = rows.get(cls.exit_code, "")
        assert f"`{cls.__name__}`" in row, f"{cls.__name__} (exit {cls.exit_code}) is not in {EXIT_CODES_DOC}"


def test_the_command_lines_own_codes_are_in_the_table() -> None:
    rows = table_rows()
    own = literal_exits(ROOT / "orchestrator" / "cli")
    assert {70, 130} <= own  # internal error, interrupted: the entry point's own
    # 0 is success; 2 is also click's usage error; 9 is a lease held by another holder.
    for code in own | {0, 2, 9}:
        assert code in rows, f"exit {code} is not in {EXIT_CODES_DOC}"
    assert "another holder" in rows[9]


def test_help_names_the_exit_codes_document() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert EXIT_CODES_DOC in " ".join(done.stdout.split())
    assert DOC.is_file()
