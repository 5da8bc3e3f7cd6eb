"""What hosts of the simulated cloud get in place of a site's settings: an SSH key, a node manager.

A real site says in its configuration and group_vars which key reaches its hosts and where the
node manager package comes from. Providers of the simulated cloud (module ``xcesim``) have no
site behind them, so the bootstrap fills in the simulated world's own: its toolkit key when
``ansible.ssh_key`` is unset, and its node manager artifact (rebuilt when missing or older than
its sources) as the install source of the ``module_xcesim`` group. A site's
``group_vars/module_xcesim.yml`` still overrides it. The simulated cloud also shows the console
of its instances, where each host publishes its SSH host keys at boot (``console_keys``) and a
first boot prints its result line (``console_readers``, ``first_boot_results``), and it gives
interruption notices (``notice_readers``).

The decision is taken here; the simulated world's parts come in as a ``SimulatedWorld``, because
the orchestrator's layers do not import the simulated world (the ``sim-apart`` import contract):
the command line, which may know both, hands them over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.ansible.hostkeys import KeySource, KeyTarget, Published
from orchestrator.configfile import LoadedConfig
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.ops.consoleresults import Console, ConsoleRead, ConsoleResults
from orchestrator.ops.notices import NoticeRead

SIM_MODULE = "xcesim"
SIM_GROUP = f"module_{SIM_MODULE}"


@dataclass(frozen=True)
class SimulatedWorld:
    """The simulated world's parts the bootstrap of its hosts uses."""

    toolkit_key: Callable[[Path], Path]  # sim state dir -> the toolkit's private SSH key
    artifact: Callable[[Path], Path]  # sim state dir -> where the node manager artifact is kept
    sources: Path  # the directory whose ``*.py`` files the artifact is built from
    build: Callable[[Path], Path]  # build the artifact into a directory; returns its path
    # (sim state dir, instance id) -> that instance's console as the cloud shows it, None before boot
    console: Callable[[Path, str], Published | None] | None = None
    # The same, its latest 64 KiB (where a first boot's result line is, ``ops.firstboot``).
    console_latest: Callable[[Path, str], Published | None] | None = None
    # (sim state dir, tags) -> the interruption notices of the live instances with those tags.
    notices: Callable[[Path, Mapping[str, str]], Sequence[object]] | None = None


class ConsoleKeys:
    """Host keys published on the consoles of the simulated cloud's instances (``hostkeys.KeySource``)."""

    def __init__(self, read: Callable[[Path, str], Published | None], sim_dir: Path, providers: set[str]) -> None:
        self._read = read
        self._sim_dir = sim_dir
        self._providers = providers

    def publishes(self, target: KeyTarget) -> bool:
        """Only hosts of providers of the simulated cloud have a console here."""
        return target.provider in self._providers

    def read(self, target: KeyTarget) -> Published | None:
        """The console of ``target``'s instance so far."""
        return self._read(self._sim_dir, target.instance_id)


def console_keys(config: Config, world: SimulatedWorld | None) -> KeySource | None:
    """Where published host keys of the simulated cloud's hosts are read, when there are such hosts."""
    providers = {name for name, p in config.providers.items() if p.module == SIM_MODULE}
    if world is None or world.console is None or not providers:
        return None
    return ConsoleKeys(world.console, config.sim_state_dir(), providers)


def console_readers(world: SimulatedWorld | None) -> dict[str, ConsoleRead]:
    """How consoles are read per provider module, for first-boot results: the simulated cloud's
    (when the world is handed over); the other modules' APIs are not built in (docs/provider-modules.md)."""
    if world is None or world.console_latest is None:
        return {}
    latest = world.console_latest

    def read(config: Config, provider: str, instance_id: str) -> Console | None:
        published = latest(config.sim_state_dir(), instance_id)
        return None if published is None else Console(published.instance_id, published.address, published.console)

    return {SIM_MODULE: read}


def notice_readers(world: SimulatedWorld | None) -> dict[str, NoticeRead]:
    """How interruption notices are read per provider module: the simulated cloud's (when the
    world is handed over), for the instances tagged with the provider's cluster and name; the
    other modules' feeds are not built in (docs/provider-modules.md, "Interruption notices")."""
    if world is None or world.notices is None:
        return {}
    notices = world.notices

    def read(config: Config, provider: str) -> Sequence[object]:
        return notices(config.sim_state_dir(), {owner.CLUSTER: config.cluster, owner.PROVIDER: provider})

    return {SIM_MODULE: read}


def first_boot_results(config: Callable[[], Config], world: SimulatedWorld | None) -> ConsoleResults:
    """The first-boot outcomes of hosts not joined, read through each provider module's console
    (``config``: the configuration in force when it is called, a reload's too)."""
    return ConsoleResults(config, console_readers(world))


def simulated_sources(
    loaded: LoadedConfig, world: SimulatedWorld | None
) -> tuple[LoadedConfig, dict[str, dict[str, Any]]]:
    """The configuration (with the world's key when none is set) and the group variables to add."""
    config = loaded.config
    if world is None or not any(p.module == SIM_MODULE for p in config.providers.values()):
        return loaded, {}
    sim_dir = config.sim_state_dir()
    key = world.toolkit_key(sim_dir)
    if config.ansible.ssh_key is None and key.exists():
        ansible = config.ansible.model_copy(update={"ssh_key": key})
        loaded = dataclasses.replace(loaded, config=config.model_copy(update={"ansible": ansible}))
    artifact = world.artifact(sim_dir)
    newest = max((p.stat().st_mtime for p in world.sources.glob("*.py")), default=0.0)
    if not artifact.exists() or artifact.stat().st_mtime < newest:
        # Reproducible build (fixed times, sorted members): a rebuild of the same sources has the
        # same bytes, so the role's copy stays unchanged on hosts that have it.
        artifact = Path(world.build(artifact.parent))
    return loaded, {
        SIM_GROUP: {
            "xce_node_manager_install_method": "artifact",
            "xce_node_manager_archive_src": str(artifact),
            # The artifact bundles pycapnp for this machine's CPython; hosts share its /usr.
            "xce_node_manager_interpreter": "/usr/bin/python3",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    }
