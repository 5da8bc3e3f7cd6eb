"""constraints.txt pins the versions ``make test`` runs with (scripts/freeze-constraints.sh writes it).

Sites install with ``pip install -c constraints.txt`` (contrib/systemd/README.md) and
scripts/setup-env.sh does too: the file must list every package of the test environment at the
version installed there, and every runtime dependency that pyproject.toml declares.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "run scripts/freeze-constraints.sh (after scripts/setup-env.sh)"
# What `pip freeze` leaves out on purpose: the installers themselves and this project.
NOT_PINNED = {"pip", "setuptools", "wheel", "distribute", "xce-provisioner"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[_normal(name)] = version.strip()
    return pins


def test_every_installed_package_is_pinned_at_its_installed_version() -> None:
    pins = _pins()
    installed = {_normal(d.metadata["Name"]): d.version for d in distributions()}
    wrong = sorted(
        f"{name} {version} (constraints.txt: {pins.get(name, 'missing')})"
        for name, version in installed.items()
        if name not in NOT_PINNED and pins.get(name) != version
    )
    assert not wrong, f"installed but not pinned at that version: {wrong}; {REGENERATE}"


def test_every_declared_dependency_is_pinned() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    names = {_normal(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in declared}
    missing = sorted(names - _pins().keys())
    assert not missing, f"declared in pyproject.toml, not in constraints.txt: {missing}; {REGENERATE}"


def test_the_environment_and_the_site_install_use_the_constraints() -> None:
    assert "-c constraints.txt" in (ROOT / "scripts" / "setup-env.sh").read_text()
    assert "pip install -c constraints.txt" in (ROOT / "contrib" / "systemd" / "README.md").read_text()
