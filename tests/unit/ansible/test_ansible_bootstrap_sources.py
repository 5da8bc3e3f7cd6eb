"""The service's decision for hosts of the simulated cloud, and its refusal of bad cloud names."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.clients.ansible.inventory import InstanceRecord, read_inventory
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.services.bootstrap import bootstrap
from orchestrator.services.bootstrap_sources import SimulatedWorld, simulated_sources


def _loaded(tmp_path: Path, module: str = "xcesim", ssh_key: str = "") -> LoadedConfig:
    text = f"""
cluster: t
state_dir: {tmp_path / "state"}
controller: {{addresses: ["127.0.0.1:7441"], ca: system}}
ansible: {{{"ssh_key: " + ssh_key if ssh_key else ""}}}
providers: {{p: {{module: {module}}}}}
templates:
  cpu: {{providers: {{p: {{flavor: a, image: b}}}}}}
"""
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


class _World:
    """A simulated world whose builder counts its builds."""

    def __init__(self, tmp_path: Path) -> None:
        self.sources = tmp_path / "src"
        self.sources.mkdir()
        (self.sources / "a.py").write_text("")
        os.utime(self.sources / "a.py", (1000, 1000))
        self.builds: list[Path] = []

    def build(self, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "nm.tar.gz").write_bytes(b"x")
        self.builds.append(dest)
        return dest / "nm.tar.gz"

    def parts(self) -> SimulatedWorld:
        return SimulatedWorld(
            toolkit_key=lambda sim: sim / "ssh" / "id_ed25519",
            artifact=lambda sim: sim / "artifacts" / "nm.tar.gz",
            sources=self.sources,
            build=self.build,
        )


def test_simulated_hosts_get_the_worlds_key_and_a_fresh_artifact(tmp_path: Path) -> None:
    world = _World(tmp_path)
    loaded = _loaded(tmp_path)
    key = loaded.config.sim_state_dir() / "ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("k")

    first, group_vars = simulated_sources(loaded, world.parts())
    again, _ = simulated_sources(loaded, world.parts())

    assert first.config.ansible.ssh_key == key
    artifact = loaded.config.sim_state_dir() / "artifacts" / "nm.tar.gz"
    assert group_vars["module_xcesim"]["xce_node_manager_archive_src"] == str(artifact)
    assert group_vars["module_xcesim"]["xce_node_manager_install_method"] == "artifact"
    assert len(world.builds) == 1  # the second call found it newer than its sources
    os.utime(artifact, (2000, 2000))
    os.utime(world.sources / "a.py", (3000, 3000))  # a source changed after the build: rebuilt
    simulated_sources(loaded, world.parts())
    assert len(world.builds) == 2
    assert again.config.ansible.ssh_key == key


def test_a_site_key_and_other_modules_are_left_alone(tmp_path: Path) -> None:
    world = _World(tmp_path)
    mine = tmp_path / "site_key"
    mine.write_text("k")
    loaded, group_vars = simulated_sources(_loaded(tmp_path, ssh_key=str(mine)), world.parts())
    assert loaded.config.ansible.ssh_key == mine and "module_xcesim" in group_vars
    other = _loaded(tmp_path, module="aws")
    assert simulated_sources(other, world.parts()) == (other, {})
    assert simulated_sources(_loaded(tmp_path), None)[1] == {}
    assert len(world.builds) == 1


def test_invalid_cloud_names_are_refused_per_host(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, module="aws")
    records = [
        InstanceRecord("op1-000", "i-1", "web*", "10.0.0.1", "cpu", "p", "op1"),
        InstanceRecord("op1-001", "i-2", "{{ lookup('pipe', 'id') }}", "10.0.0.2", "cpu", "p", "op1"),
    ]

    result = bootstrap(loaded, tmp_path, records=records, op="op1", scanner=lambda *_: [])

    assert {h: (r.status, r.task) for h, r in result.hosts.items()} == {
        "web*": ("failed", "check the host name and address"),
        "{{ lookup('pipe', 'id') }}": ("failed", "check the host name and address"),
    }
    assert "'web*' is not a valid host name" in (result.hosts["web*"].message or "")
    written = read_inventory(tmp_path / "state" / "ansible" / "inventory" / "xceprov.yml")
    assert written["all"]["hosts"] == {}
