"""The service's decision for hosts of the simulated cloud, and its refusal of bad cloud names."""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path

from orchestrator.clients.ansible.hostkeys import Published
from orchestrator.clients.ansible.inventory import InstanceRecord, read_inventory
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model.published_keys import BEGIN, END
from orchestrator.services.bootstrap import bootstrap
from orchestrator.services.bootstrap_sources import SimulatedWorld, console_keys, simulated_sources


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


def test_a_hostile_console_of_a_simulated_host_fails_only_that_host_with_no_scan(tmp_path: Path) -> None:
    """The simulated cloud's console reaches the bootstrap through the world: a block smuggling a
    second address line, and a console the cloud reports for another address, are each one line,
    nothing is scanned or pinned. Consoles are read only for hosts of the simulated cloud."""
    loaded = _loaded(tmp_path)
    key = "ssh-ed25519 " + base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + b"k" * 32).decode()
    consoles = {
        "i-1": Published("i-1", "10.0.0.1", f"{BEGIN}\n{key}\n10.0.0.2 {key}\n{END}\n"),
        "i-2": Published("i-2", "10.0.0.9", f"{BEGIN}\n{key}\n{END}\n"),
    }
    world = dataclasses.replace(_World(tmp_path).parts(), console=lambda _sim, iid: consoles.get(iid))
    records = [
        InstanceRecord("op1-000", "i-1", "h1", "10.0.0.1", "cpu", "p", "op1"),
        InstanceRecord("op1-001", "i-2", "h2", "10.0.0.2", "cpu", "p", "op1"),
    ]
    scanned: list[str] = []

    def scanner(address: str, port: int, timeout: float) -> list[str]:
        scanned.append(address)
        return []

    result = bootstrap(loaded, tmp_path, records=records, op="op1", scanner=scanner, world=world, ssh_wait=0)

    assert {h: (r.status, r.task) for h, r in result.hosts.items()} == {
        "h1": ("unreachable", "record SSH host key"),
        "h2": ("unreachable", "record SSH host key"),
    }
    assert "'10.0.0.2' is not an SSH host key type" in (result.hosts["h1"].message or "")
    assert "published for address '10.0.0.9', not 10.0.0.2" in (result.hosts["h2"].message or "")
    assert all("\n" not in (r.message or "") for r in result.hosts.values())
    assert scanned == []
    assert (tmp_path / "state" / "ansible" / "known_hosts").read_text() == ""
    # The console is read only for providers of the simulated cloud: other modules are scanned.
    assert console_keys(_loaded(tmp_path, module="aws").config, world) is None
    assert console_keys(loaded.config, dataclasses.replace(world, console=None)) is None  # a world without consoles
