"""What hosts of the simulated cloud get in place of a site's settings: an SSH key, a node manager.

A real site says in its configuration and group_vars which key reaches its hosts and where the
node manager package comes from. Providers of the simulated cloud (module ``xcesim``) have no
site behind them, so the bootstrap fills in the simulated world's own: its toolkit key when
``ansible.ssh_key`` is unset, and its node manager artifact (rebuilt when missing or older than
its sources) as the install source of the ``module_xcesim`` group. A site's
``group_vars/module_xcesim.yml`` still overrides it.

The decision is taken here; the simulated world's parts come in as a ``SimulatedWorld``, because
the orchestrator's layers do not import the simulated world (the ``sim-apart`` import contract):
the command line, which may know both, hands them over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.configfile import LoadedConfig

SIM_MODULE = "xcesim"
SIM_GROUP = f"module_{SIM_MODULE}"


@dataclass(frozen=True)
class SimulatedWorld:
    """The simulated world's parts the bootstrap of its hosts uses."""

    toolkit_key: Callable[[Path], Path]  # sim state dir -> the toolkit's private SSH key
    artifact: Callable[[Path], Path]  # sim state dir -> where the node manager artifact is kept
    sources: Path  # the directory whose ``*.py`` files the artifact is built from
    build: Callable[[Path], Path]  # build the artifact into a directory; returns its path


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
