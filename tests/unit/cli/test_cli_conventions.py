"""The conventions of docs/cli.md on every command of the tree: -h, -v after the verb, metavariables."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from cli_run import xceprov_builtin
from click.testing import CliRunner

from orchestrator.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]


Words = tuple[str, ...]


def commands(command: click.Command = cli, path: Words = ()) -> Iterator[tuple[Words, click.Command]]:
    """Every command of the tree with the words that reach it (the root is ``()``)."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from commands(sub, (*path, name))


PATHS = [path for path, _ in commands()]


def documented_metavariables() -> set[str]:
    """The first column of the table in docs/cli.md (``KEY``, ``VALUE`` share a row)."""
    words: set[str] = set()
    for line in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if len(cells) > 3 and "`" in cells[1]:
            words.update(re.findall(r"`([A-Z_]+)`", cells[1]))
    return words


def shown_metavariables() -> Iterator[tuple[str, str, str]]:
    """(command, parameter key, metavariable as --help shows it) for every parameter taking a value."""
    for path, command in commands():
        ctx = click.Context(command, info_name=" ".join(("xceprov", *path)))
        for param in command.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count or param.hidden):
                continue
            if isinstance(param.type, click.Choice):
                continue  # shows its words, not a name
            # An option is known by its long name, an argument by its name.
            key = f"option {max(param.opts, key=len)}" if isinstance(param, click.Option) else f"argument {param.name}"
            yield " ".join(("xceprov", *path)), key, param.make_metavar(ctx)


# Options that take one of a few words: --help shows the words, a document may name them.
CHOICES = {
    max(p.opts, key=len)
    for _path, command in commands()
    for p in command.params
    if isinstance(p, click.Option) and isinstance(p.type, click.Choice)
}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "xceprov")
def test_h_is_help_on_every_command(path: tuple[str, ...]) -> None:
    out = CliRunner().invoke(cli, [*path, "-h"], prog_name="xceprov")

    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"Usage: {' '.join(('xceprov', *path))} ")
    assert "-h, --help" in out.output


@pytest.mark.parametrize("path", [p for p in PATHS if p], ids=" ".join)
def test_every_command_below_the_group_takes_v(path: tuple[str, ...]) -> None:
    out = CliRunner().invoke(cli, [*path, "-h"], prog_name="xceprov")

    assert "-v, --verbose" in out.output


@pytest.mark.parametrize(
    "args",
    [("plan", "cpu=1"), ("sim", "fault", "show")],
    ids=" ".join,
)
def test_v_after_the_verb_is_v_before_it(tmp_path: Path, args: tuple[str, ...]) -> None:
    # A missing configuration file: one line without -v, the traceback with it, wherever it stands.
    config = ("--config", str(tmp_path / "missing.yaml"))

    quiet = xceprov_builtin(tmp_path, *config, *args)
    before = xceprov_builtin(tmp_path, "-v", *config, *args)
    after = xceprov_builtin(tmp_path, *config, *args, "-v")

    assert quiet.returncode == before.returncode == after.returncode != 0
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in before.stderr and "Traceback" in after.stderr, after.stderr
    assert after.stderr.splitlines()[-1] == before.stderr.splitlines()[-1] == quiet.stderr.strip()


def test_every_metavariable_is_a_documented_name() -> None:
    documented = documented_metavariables()
    unknown = [
        f"{command} {key}: {shown}"
        for command, key, shown in shown_metavariables()
        if not set(re.findall(r"[A-Za-z_]+", shown)) <= documented
    ]

    assert not unknown, f"not in docs/cli.md (TEXT, INTEGER, PATH name no concept): {unknown}"


def test_one_parameter_has_one_metavariable_in_every_verb() -> None:
    names: dict[str, set[str]] = defaultdict(set)
    for _command, key, shown in shown_metavariables():
        names[key].add(shown.strip("[].").rstrip("."))

    assert {key: shown for key, shown in names.items() if len(shown) > 1} == {}


def test_every_documented_metavariable_is_used() -> None:
    used = {word for _c, _k, shown in shown_metavariables() for word in re.findall(r"[A-Z_]+", shown)}

    assert documented_metavariables() - used == set()


def test_the_documents_use_the_metavariables_of_the_command_line() -> None:
    shown: dict[str, set[str]] = defaultdict(set)
    for _command, key, metavar in shown_metavariables():
        shown[key].add(metavar)
    wrong = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for span in re.findall(r"`(xceprov [^`]*)`", doc.read_text(encoding="utf-8")):
            for option, metavar in re.findall(r"(--[a-z][a-z-]*)[ =]([A-Z][A-Z_]*)\b", span):
                if option not in CHOICES and metavar not in shown.get(f"option {option}", set()):
                    wrong.append(f"{doc.name}: `{span}`: {option} {metavar}")

    assert not wrong, wrong
