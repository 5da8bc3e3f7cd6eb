"""``xceprov sim ...``: the embedded simulated world (controller, cloud, hosts).

Sub-groups are registered by the modules that implement them (cloud, fault, controller, hosts).
"""

from __future__ import annotations

import click


@click.group()
def sim() -> None:
    """Run and inspect the embedded simulated world."""
