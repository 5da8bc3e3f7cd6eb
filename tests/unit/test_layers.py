"""The import structure of ``orchestrator``: no cycles anywhere, every package under a contract.

``lint-imports`` (``.importlinter``) enforces the layers and the sibling-level cycles; these
tests add what its contracts cannot say: no cycle between any two modules (a package's
``__init__`` and its own submodules included), and no top-level package that escapes the
layers contract because nobody listed it.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
# Outside the layers on purpose: errors is importable from every layer and imports nothing;
# sim is kept apart by its own forbidden contracts.
OUTSIDE_LAYERS = {"orchestrator.errors", "orchestrator.durable", "orchestrator.sim"}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_any_modules() -> None:
    cycles = _cycles(grimp.build_graph("orchestrator"))
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_sees_a_cycle() -> None:
    # The check above is only worth something if the finder reports a real cycle.
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_every_top_level_package_is_in_the_layers() -> None:
    contracts = configparser.ConfigParser()
    contracts.read(ROOT / ".importlinter")
    layers = contracts["importlinter:contract:layers"]["layers"]
    layered = {name.strip() for line in layers.splitlines() for name in line.split("|") if name.strip()}
    graph = grimp.build_graph("orchestrator")
    top_level = set(graph.find_children("orchestrator"))
    missing = sorted(top_level - layered - OUTSIDE_LAYERS)
    assert missing == [], f"add these to the layers contract in .importlinter: {missing}"
