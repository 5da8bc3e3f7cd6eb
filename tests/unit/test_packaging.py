"""One version for the package and the collection; the metadata a site and an index read.

pyproject.toml holds the version; ansible/galaxy.yml and the two changelogs follow it
(``scripts/set_version.py`` writes them all).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project: dict[str, object] = tomllib.load(handle)["project"]
    return project


def _galaxy() -> dict[str, object]:
    galaxy: dict[str, object] = yaml.safe_load((ROOT / "ansible" / "galaxy.yml").read_text())
    return galaxy


def test_the_collection_has_the_packages_version() -> None:
    assert _galaxy()["version"] == _project()["version"]


def test_xceprov_version_says_the_packages_version(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"xceprov, version {_project()['version']}"


def test_both_changelogs_have_an_unreleased_section_and_one_for_the_version() -> None:
    version = _project()["version"]
    for name in ("CHANGELOG.md", "ansible/CHANGELOG.md"):
        headings = [line for line in (ROOT / name).read_text().splitlines() if line.startswith("## ")]
        assert headings[0] == "## [Unreleased]", name
        assert headings[1].startswith(f"## [{version}] - "), f"{name}: {headings[1]!r} is not the current version"


def test_project_urls_and_classifiers_and_the_collection_names_the_same_repository() -> None:
    project, galaxy = _project(), _galaxy()
    urls = project["urls"]
    assert isinstance(urls, dict)
    assert {"Homepage", "Source", "Documentation", "Issues", "Changelog"} <= urls.keys()
    assert galaxy["repository"] == urls["Source"]
    assert galaxy["documentation"] == urls["Documentation"]
    assert galaxy["issues"] == urls["Issues"]
    assert all(url.startswith(f"{urls['Source']}") for url in urls.values())
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    # requires-python >=3.11: the versions named are the ones tested.
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "the SPDX `license` says it (PEP 639)"


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    for name in (
        "pyproject.toml",
        "ansible/galaxy.yml",
        "CHANGELOG.md",
        "ansible/CHANGELOG.md",
        "scripts/set_version.py",
    ):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    return copy


def _set_version(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = copy / "scripts" / "set_version.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=False)


def test_set_version_writes_the_package_and_the_collection_and_dates_unreleased(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    done = _set_version(copy, "9.8.7")
    assert done.returncode == 0, done.stderr
    with (copy / "pyproject.toml").open("rb") as handle:
        assert tomllib.load(handle)["project"]["version"] == "9.8.7"
    assert yaml.safe_load((copy / "ansible" / "galaxy.yml").read_text())["version"] == "9.8.7"
    for name in ("CHANGELOG.md", "ansible/CHANGELOG.md"):
        headings = [line for line in (copy / name).read_text().splitlines() if line.startswith("## ")]
        assert headings[0] == "## [Unreleased]"
        assert headings[1].startswith("## [9.8.7] - ")


def test_set_version_refuses_a_version_that_is_not_x_y_z_and_changes_nothing(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    before = (copy / "pyproject.toml").read_text(), (copy / "ansible" / "galaxy.yml").read_text()
    done = _set_version(copy, "2.0")
    assert done.returncode == 2
    assert done.stderr.strip() == "set_version: usage: set_version.py X.Y.Z (got 2.0)"
    assert ((copy / "pyproject.toml").read_text(), (copy / "ansible" / "galaxy.yml").read_text()) == before
