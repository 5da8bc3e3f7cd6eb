"""The import structure of ``orchestrator``: no cycles anywhere, every package under a contract.

``lint-imports`` (``.importlinter``) enforces the layers and the sibling-level cycles; these
tests add what its contracts cannot say: no cycle between any two modules (a package's
``__init__`` and its own submodules included), no top-level package that escapes the
layers contract because nobody listed it, no module outside ``clients.postgres`` that the
psycopg contract leaves unwatched, and one module that opens the shared store.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
# Outside the layers on purpose: errors is importable from every layer and imports nothing;
# sim is kept apart by its own forbidden contracts.
OUTSIDE_LAYERS = {"orchestrator.errors", "orchestrator.sim"}
POSTGRES = "orchestrator.clients.postgres"
# The modules outside it that may import ``clients.postgres`` at run time, and why.
POSTGRES_USERS = {
    # the one way from a configuration to the shared store, its locks, lease rows and schema
    "orchestrator.workspace.pgsite": "opens the shared store",
    # the connection string's secrets, registered where it is read
    "orchestrator.workspace.pgconn": "redaction",
    # Terraform's own tables, read for the inventory plugin too, which has no configuration
    "orchestrator.workspace.tfstates": "Terraform's state rows",
}


def _contracts() -> configparser.ConfigParser:
    contracts = configparser.ConfigParser()
    contracts.read(ROOT / ".importlinter")
    return contracts


def _listed(contract: str, key: str) -> set[str]:
    """The module names of one contract's list (``|`` separates siblings of a layer)."""
    text = _contracts()[f"importlinter:contract:{contract}"][key]
    return {name.strip() for line in text.splitlines() for name in line.split("|") if name.strip()}


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
    layered = _listed("layers", "layers")
    graph = grimp.build_graph("orchestrator")
    top_level = set(graph.find_children("orchestrator"))
    missing = sorted(top_level - layered - OUTSIDE_LAYERS)
    assert missing == [], f"add these to the layers contract in .importlinter: {missing}"


# The checks below build their graph afresh (``cache_dir=None``): grimp's cache may lag an edit.
def test_psycopg_is_imported_only_under_clients_postgres() -> None:
    graph = grimp.build_graph("orchestrator", include_external_packages=True, cache_dir=None)
    importers = sorted(graph.find_modules_that_directly_import("psycopg"))
    assert importers, "nothing imports psycopg: the check below would pass whatever the code does"
    outside = [name for name in importers if name != POSTGRES and not name.startswith(POSTGRES + ".")]
    assert outside == [], f"psycopg imported outside {POSTGRES} (move the SQL there): {outside}"


def test_the_psycopg_contract_watches_every_module_but_clients_postgres() -> None:
    # lint-imports checks only the source modules a contract lists: a new package (or client) left
    # off the list could import psycopg unseen.
    contract = _contracts()["importlinter:contract:psycopg-in-postgres"]
    assert contract["forbidden_modules"].split() == ["psycopg"]
    watched = _listed("psycopg-in-postgres", "source_modules")
    graph = grimp.build_graph("orchestrator")
    top_level = set(graph.find_children("orchestrator")) - {"orchestrator.clients"}
    clients = set(graph.find_children("orchestrator.clients")) - {POSTGRES}
    assert sorted(top_level | clients) == sorted(watched)


def test_one_module_opens_the_shared_store() -> None:
    # Every user of the shared store (its documents, members, locks, lease rows, schema check)
    # goes from its configuration through one opener; its value types may be named elsewhere
    # for type checking only.
    graph = grimp.build_graph("orchestrator", exclude_type_checking_imports=True, cache_dir=None)
    importers = set()
    for module in graph.find_children(POSTGRES) | {POSTGRES}:
        importers |= graph.find_modules_that_directly_import(module)
    outside = sorted(name for name in importers if not name.startswith(POSTGRES))
    assert outside == sorted(POSTGRES_USERS), (
        f"open the shared store through orchestrator.workspace.pgsite; these import {POSTGRES}: {outside}"
    )
