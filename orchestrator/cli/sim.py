"""``xceprov sim ...``: the embedded simulated world (controller, cloud, hosts).

Sub-groups are registered by the modules that implement them (cloud, fault, controller, hosts).
"""

from __future__ import annotations

import click


@click.group()
def sim() -> None:
    """Run and inspect the embedded simulated world."""


def _register_cloud() -> None:
    # The simulated cloud's verbs: `xceprov sim cloud ...` and `xceprov sim fault ...`.
    from orchestrator.cli import sim_cloud

    sim.add_command(sim_cloud.cloud)
    sim.add_command(sim_cloud.fault)


_register_cloud()


def _register_world() -> None:
    # The world's lifecycle and the simulated hosts: `xceprov sim up|down|status|hosts ...`.
    from orchestrator.cli import sim_world

    sim_world.register(sim)


_register_world()


def _register_controller() -> None:
    # The running simulated controller: `xceprov sim failover|submit` (started by `sim up`).
    from orchestrator.cli import sim_controller

    sim_controller.register(sim)


_register_controller()
