"""What the bundled Terraform writes in a working directory is private whatever the umask.

Real Terraform (the bundled library) on a configuration of ``terraform_data`` only, so no
provider is installed: its state, the state's backup and a saved plan, under a usual umask.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.clients.terraform.engine import BundledEngine

CONFIG = """
variable "n" {
  type = number
}
resource "terraform_data" "a" {
  input = var.n
}
"""


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)  # what most shells give: Terraform would write 0644 files
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of every file and directory under ``root`` (links not followed)."""
    return {
        str(path.relative_to(root)): stat.S_IMODE(path.lstat().st_mode)
        for path in root.rglob("*")
        if not path.is_symlink()
    }


def test_state_backup_and_saved_plan_are_private_whatever_the_umask(tmp_path: Path, usual_umask: None) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    (workdir / "main.tf").write_text(CONFIG)
    (workdir / "main.tf").chmod(0o600)
    engine = BundledEngine(attach_providers=False)
    engine.init(workdir)
    for n in (1, 2):  # the second apply makes terraform.tfstate.backup
        (workdir / "n.tfvars.json").write_text(f'{{"n": {n}}}')
        (workdir / "n.tfvars.json").chmod(0o600)
        engine.plan(workdir, var_files=[Path("n.tfvars.json")], out=Path("op.tfplan"))
        engine.apply(workdir, plan_file=Path("op.tfplan"))
    found = modes(workdir)
    assert {"terraform.tfstate", "terraform.tfstate.backup", "op.tfplan"} <= set(found)
    assert {name: mode for name, mode in found.items() if mode not in (0o600, 0o700)} == {}
