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


def test_validate_warns_of_a_bake_older_than_today_and_not_of_a_current_one(tmp_path: Path) -> None:
    import dataclasses

    from tffake import FakeEngine, unit_executor

    from orchestrator.model.images import BuiltFrom, with_template_image
    from orchestrator.services.images import stale_image_warnings

    site = loaded(tmp_path)
    engine = FakeEngine()
    executor = unit_executor(site, engine)
    today = built_from(site, ROOT, "cpu", "debian-12", None)
    old = BuiltFrom("debian-12", "0.9.0", today.node_manager_sha256, today.site_roles)
    executor.bake("sim", "cpu", "op-6b000000-000000000007", old, lambda _p, _b: "changed")
    newest = dataclasses.replace(site, config=with_template_image(site.config, "cpu", "sim", "bake:newest"))
    [line] = stale_image_warnings(newest, ROOT, engine)
    assert line.startswith("templates.cpu.providers.sim.image: bake:newest (img-op-6b000000-000000000007-image)")
    assert "xce:role-version 0.9.0, now " in line and line.endswith("xceprov image bake cpu --provider sim")
    # A bake with today's records: nothing to say.
    executor.bake("sim", "cpu", "op-6b000000-000000000008", today, lambda _p, _b: "changed")
    assert stale_image_warnings(newest, ROOT, engine) == []
