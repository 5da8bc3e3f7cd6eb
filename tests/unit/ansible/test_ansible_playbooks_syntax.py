"""The shipped playbooks parse with the shipped config and the collection's inventory plugin, as
an operator would run them by hand from the toolkit's root (no hosts: nothing is contacted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("playbook", ["bootstrap.yml", "decommission.yml"])
def test_syntax_with_the_dynamic_inventory(playbook: str, tmp_path: Path) -> None:
    # From the toolkit's root, as docs/bootstrap.md says: Ansible finds ./ansible.cfg itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        XCEPROV_STATE_DIR=str(tmp_path),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    out = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "--syntax-check",
            "-i",
            "inventories/xceprov.yml",
            "-e",
            f"xce_bootstrap_pre_playbook={ROOT / 'examples' / 'site' / 'pre-bootstrap.yml'}",
            f"ansible/playbooks/{playbook}",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The plugin parsed the inventory file (an empty state: no hosts), no fallback plugin did.
    assert "Unable to parse" not in out.stderr and "Failed to parse" not in out.stderr, out.stderr
