"""The shipped playbooks parse with the shipped config and the dynamic inventory script, as an
operator would run them by hand (no hosts: nothing is contacted)."""

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
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible" / "ansible.cfg"),
               XCEPROV_STATE_DIR=str(tmp_path), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(ROOT / "inventories" / "xceprov_inventory.py"),
         "-e", f"xce_bootstrap_pre_playbook={ROOT / 'examples' / 'site' / 'pre-bootstrap.yml'}",
         str(ROOT / "ansible" / "playbooks" / playbook)],
        env=env, capture_output=True, text=True, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
