"""The Ansible collection as a site installs it: built, installed into a path of its own, and used
by full name from a directory outside the checkout (no toolkit ansible.cfg, no plugin path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.clients.ansible.inventory import InstanceRecord, build_inventory, write_inventory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = ("bootstrap", "decommission")
HOSTILE = "{{ lookup('pipe', 'id') }}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The collection built from ``ansible/`` and installed: (tarball, collections path)."""
    base = tmp_path_factory.mktemp("collection")
    env = _site_env(base, base / "collections")
    _run(["ansible-galaxy", "collection", "build", str(ROOT / "ansible"), "--output-path", str(base / "dist")], env)
    (tarball,) = (base / "dist").glob("xce-provisioner-*.tar.gz")
    _run(["ansible-galaxy", "collection", "install", str(tarball), "-p", str(base / "collections")], env)
    return tarball, base / "collections"


def _site_env(base: Path, collections: Path | None = None) -> dict[str, str]:
    """A site's environment: none of the checkout's settings, an empty ansible.cfg of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "XCEPROV_"))}
    (base / "ansible.cfg").write_text("[defaults]\n")
    env.update(
        ANSIBLE_CONFIG=str(base / "ansible.cfg"),
        ANSIBLE_HOME=str(base / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(base / "tmp"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    out = subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{argv}: {out.stdout}{out.stderr}"
    # A plugin not found is only a warning to Ansible (the inventory is then empty): none allowed.
    assert "WARNING" not in out.stderr and "Unable to parse" not in out.stderr, out.stderr
    return out.stdout


def _site(tmp_path: Path) -> Path:
    """A site directory outside the checkout: a state holding one provisioned host and the
    inventory the toolkit wrote for it."""
    site = tmp_path / "site"
    work = site / "state" / "work" / "demo" / "sim"
    work.mkdir(parents=True)
    instance = {
        "id": "i-1",
        "name": "h1",
        "address": "10.0.0.1",
        "tags": {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": HOSTILE},
    }
    tfstate = {"version": 4, "outputs": {"instances": {"value": {"op1-000": instance}}}}
    (work / "terraform.tfstate").write_text(json.dumps(tfstate))
    written = build_inventory([InstanceRecord("op1-000", "i-1", "h1", "10.0.0.1", "cpu", "sim", HOSTILE)])
    write_inventory(site / "state" / "ansible" / "inventory" / "xceprov.yml", written)
    assert not site.resolve().is_relative_to(ROOT.resolve())
    return site


def test_the_built_collection_leaves_out_lint_and_git_settings(installed: tuple[Path, Path]) -> None:
    with tarfile.open(installed[0]) as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {".ansible-lint", ".gitignore"}.isdisjoint(names), sorted(names)
    assert {"xceprov.py", "bootstrap.yml", "decommission.yml", "README.md"} <= names


def test_the_shipped_written_and_example_inventories_work_outside_the_checkout(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    site = _site(tmp_path)
    env = {**_site_env(site, installed[1]), "XCEPROV_STATE_DIR": "state"}
    doc = json.loads(_run(["ansible-doc", "-t", "inventory", "--json", "xce.provisioner.xceprov"], env, site))
    (site / "example").mkdir()
    (site / "example" / "xceprov.yml").write_text(doc["xce.provisioner.xceprov"]["examples"])
    (site / "shipped").mkdir()
    (site / "shipped" / "xceprov.yml").write_text((ROOT / "inventories" / "xceprov.yml").read_text())

    for inventory in ("example/xceprov.yml", "shipped/xceprov.yml", "state/ansible/inventory/xceprov.yml"):
        out = json.loads(_run(["ansible-inventory", "-i", inventory, "--list"], env, site))
        assert out["template_cpu"]["hosts"] == ["h1"], inventory
        hostvars = out["_meta"]["hostvars"]["h1"]
        assert hostvars["ansible_host"] == {"__ansible_unsafe": "10.0.0.1"}, inventory
        assert hostvars["xce_op_id"] == {"__ansible_unsafe": HOSTILE}, inventory


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_the_shipped_playbooks_pass_a_syntax_check_by_full_name(
    installed: tuple[Path, Path], tmp_path: Path, playbook: str
) -> None:
    site = _site(tmp_path)
    (site / "xceprov.yml").write_text("plugin: xce.provisioner.xceprov\n")
    env = {**_site_env(site, installed[1]), "XCEPROV_STATE_DIR": "state"}

    out = _run(["ansible-playbook", "--syntax-check", "-i", "xceprov.yml", f"xce.provisioner.{playbook}"], env, site)

    assert f"ansible_collections/xce/provisioner/playbooks/{playbook}.yml" in out


def test_without_the_toolkit_package_the_plugin_names_what_it_needs(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    site = _site(tmp_path)
    (site / "xceprov.yml").write_text("plugin: xce.provisioner.xceprov\n")
    env = {**_site_env(site, installed[1]), "XCEPROV_STATE_DIR": "state"}
    # Ansible's own Python with the toolkit's package made unimportable, as in a site's Ansible.
    without = (
        "import sys; sys.modules['orchestrator'] = None; sys.argv[0] = 'ansible-inventory'; "
        "from ansible.cli.inventory import main; main()"
    )
    argv = [sys.executable, "-c", without, "-i", "xceprov.yml", "--list"]

    out = subprocess.run(argv, env=env, cwd=site, capture_output=True, text=True, check=False)

    assert "h1" not in out.stdout
    assert "needs the toolkit's Python package xce-provisioner (module orchestrator)" in out.stderr, out.stderr
