"""No module of ``orchestrator`` uses another module's private (``_underscore``) names.

A module's private names are its own business: a caller uses the public face (for the
executor, the names ``orchestrator.ops.executor`` exports), so a module can be split or its
helpers renamed without breaking another package. The walk is by the syntax tree of each
module: an import of a private name from another module, an attribute use ``module._name``,
and an attribute use ``something._name`` (``self`` included, which catches a class reaching
into a base class of another module) where ``_name`` is defined by another module of the
package and not by this one. Names no module of the package defines (``os._exit``) are not
the package's business.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defined(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, variables, attributes set on objects."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def private_uses(sources: dict[Path, str]) -> Iterator[str]:
    """``path:line: what`` for every use of another module's private name in ``sources``."""
    trees = {path: ast.parse(text, str(path)) for path, text in sources.items()}
    modules = {_module_name(path): path for path in trees}
    defined = {path: _defined(tree) for path, tree in trees.items()}
    elsewhere: dict[str, set[Path]] = {}
    for path, names in defined.items():
        for name in names:
            elsewhere.setdefault(name, set()).add(path)
    for path, tree in sorted(trees.items()):
        name = _module_name(path)
        aliases: set[str] = set()  # local names bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(name, node, path.name == "__init__.py")
                for alias in node.names:
                    if _private(alias.name) and source in modules and source != name:
                        yield f"{path}:{node.lineno}: from {source} import {alias.name}"
                    if f"{source}.{alias.name}" in modules:
                        aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        aliases.add(alias.asname)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                yield f"{path}:{node.lineno}: {node.value.id}.{node.attr}"
            elif node.attr not in defined[path] and elsewhere.get(node.attr, set()) - {path}:
                owners = ", ".join(sorted(_module_name(p) for p in elsewhere[node.attr]))
                yield f"{path}:{node.lineno}: .{node.attr} (private to {owners})"


def _package_sources() -> dict[Path, str]:
    return {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_uses_another_modules_private_names() -> None:
    found = list(private_uses(_package_sources()))
    assert not found, "private names used across modules:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("from orchestrator.a import _helper\n", "from orchestrator.a import _helper"),
        ("from . import a\na._helper()\n", "a._helper"),
        ("import orchestrator.a as a\na._helper()\n", "a._helper"),
        ("def f(thing):\n    return thing._helper()\n", "._helper (private to orchestrator.a)"),
        ("class B:\n    def f(self):\n        return self._state\n", "._state (private to orchestrator.a)"),
    ],
)
def test_each_kind_of_reach_is_found(tmp_path: Path, user: str, expected: str) -> None:
    owner = PACKAGE / "a.py"
    other = PACKAGE / "b.py"
    sources = {
        owner: "def _helper():\n    return 1\n\nclass A:\n    def __init__(self):\n        self._state = 0\n",
        other: user,
    }
    found = list(private_uses(sources))
    assert [line.split(": ", 1)[1] for line in found] == [expected]


def test_own_private_names_and_foreign_libraries_pass() -> None:
    sources = {
        PACKAGE / "a.py": "import os\n\ndef _helper():\n    os._exit(0)\n\nclass A:\n"
        "    def __init__(self):\n        self._state = _helper()\n",
    }
    assert list(private_uses(sources)) == []
