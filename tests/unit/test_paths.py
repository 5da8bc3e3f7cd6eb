"""Where the toolkit's data are found: the package's resources, in the checkout through its links
(docs/architecture.md, "The toolkit's data"). The installed wheel is tests/integration/test_wheel_install.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import FinalError
from orchestrator.paths import DATA_DIR, toolkit_root

ROOT = Path(__file__).resolve().parents[2]


def test_in_the_checkout_the_data_are_the_repository_s_own_files() -> None:
    root = toolkit_root()
    assert root == ROOT / "orchestrator" / DATA_DIR
    # Each entry links to the repository's directory, so an edit there is what the toolkit reads.
    for name in (
        "terraform",
        "templates",
        "ansible",
        "ansible.cfg",
        "ansible-collections",
        "inventories",
        "contrib",
        "traces",
    ):
        assert (root / name).is_symlink() and (root / name).resolve() == (ROOT / name).resolve(), name
    assert (root / "ansible-collections" / "ansible_collections" / "xce" / "provisioner" / "galaxy.yml").is_file()


def test_a_package_without_its_data_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = tmp_path / "orchestrator"
    (package / DATA_DIR / "templates").mkdir(parents=True)  # no terraform/: a broken install
    monkeypatch.setattr("orchestrator.paths.resources.files", lambda _name: package)
    with pytest.raises(FinalError) as caught:
        toolkit_root()
    assert str(caught.value) == (
        f"{package / DATA_DIR}: the package's toolkit data are missing (no terraform/ or templates/); reinstall it"
    )
