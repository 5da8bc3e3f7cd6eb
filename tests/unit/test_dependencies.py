"""Every runtime dependency ``pyproject.toml`` declares is used and documented.

A declared dependency nobody imports is installed on every site for nothing (``tenacity`` was,
until the backoff helper, ``orchestrator/model/backoff.py``, made it plain that nothing needs it).
"""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Used as programs, not imported: ansible-core provides ansible-playbook, which the Ansible
# client runs (through ansible-runner).
PROGRAMS = {"ansible-core"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: prometheus_client is prometheus-client


def _dist(requirement: str) -> str:
    return _normal(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip())


def _declared() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return {_dist(r) for r in tomllib.load(handle)["project"]["dependencies"]}


def _imported_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "orchestrator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_every_runtime_dependency_is_imported_by_the_package() -> None:
    owners = packages_distributions()
    used = {_normal(dist) for module in _imported_modules() for dist in owners.get(module, [])}
    unused = sorted(_declared() - used - PROGRAMS)
    assert not unused, f"declared in pyproject.toml but imported nowhere in orchestrator/: {unused}"


def test_every_runtime_dependency_is_documented() -> None:
    documented = (ROOT / "docs" / "dependencies.md").read_text()
    missing = sorted(d for d in _declared() if f"`{d}`" not in documented)
    assert not missing, f"not in docs/dependencies.md: {missing}"


def test_every_file_lock_taken_by_hand_is_documented_with_its_reason() -> None:
    # docs/dependencies.md ("File locks, two styles") says why each of these does not use filelock.
    documented = (ROOT / "docs" / "dependencies.md").read_text()
    by_hand = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "orchestrator").rglob("*.py")
        if "fcntl.flock(" in path.read_text()
    )
    assert by_hand, "no fcntl.flock found: the search is broken"
    missing = [path for path in by_hand if f"`{path}`" not in documented]
    assert not missing, f"fcntl.flock by hand, not in docs/dependencies.md: {missing}"


def test_each_hand_made_part_says_why_no_library_does_it() -> None:
    documented = (ROOT / "docs" / "dependencies.md").read_text()
    for module, candidates in {
        "orchestrator/daemon/systemd.py": ("`sdnotify`", "`systemd-python`"),
        "orchestrator/clients/postgres/migrations.py": ("`alembic`", "`yoyo-migrations`"),
        "orchestrator/model/durations.py": ("`pytimeparse`", "`humanfriendly`"),
    }.items():
        assert (ROOT / module).is_file(), module
        assert f"`{module}`" in documented, module
        assert all(candidate in documented for candidate in candidates), (module, candidates)
