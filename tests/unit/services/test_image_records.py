"""What a bake is built from: the collection version, the archive's checksum, the site roles."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.services.image_records import built_from

ROOT = Path(__file__).resolve().parents[3]

SITE = """
cluster: c1
state_dir: {state}
controller: {{ca: system}}
ansible: {{site_dir: {site}}}
providers:
  sim: {{module: xcesim}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
    bootstrap: {{roles: [{roles}], vars: {{xce_node_manager_archive_checksum: "sha256:{sha}"}}}}
"""


def loaded(tmp_path: Path, roles: str = "", sha: str = "ab" * 32) -> LoadedConfig:
    text = SITE.format(state=tmp_path / "state", site=tmp_path / "site", roles=roles, sha=sha)
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def test_the_records_of_a_bake_today(tmp_path: Path) -> None:
    galaxy = yaml.safe_load((ROOT / "ansible" / "galaxy.yml").read_text())
    records = built_from(loaded(tmp_path), ROOT, "cpu", "debian-12", None).tags()
    assert records == {
        "xce:built-from-image": "debian-12",
        "xce:role-version": str(galaxy["version"]),
        "xce:node-manager-sha256": "ab" * 32,
        "xce:site-roles": "none",
    }


def test_the_site_roles_digest_follows_their_files(tmp_path: Path) -> None:
    role = tmp_path / "site" / "roles" / "motd" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("- name: one\n")
    first = built_from(loaded(tmp_path, "motd"), ROOT, "cpu", "b", None).site_roles
    assert len(first) == 64
    (role / "main.yml").write_text("- name: two\n")
    assert built_from(loaded(tmp_path, "motd"), ROOT, "cpu", "b", None).site_roles != first
