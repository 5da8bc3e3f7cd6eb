"""What the toolkit knows of each provider module beyond its variables (docs/provider-modules.md).

The module's contract (its ``instances``, ``common_tags`` and ``settings`` variables and its
outputs) is read from the module itself; the instance resource is not part of it, yet an import
must address it. A new module adds its row here (CONTRIBUTING.md, "Adding a provider module";
``tests/unit/terraform/test_modules_static.py`` holds the table against each module's code).
"""

from __future__ import annotations

# The instance resource of each module (docs/provider-modules.md): what an import addresses.
MODULE_INSTANCE_TYPES = {
    "xcesim": "xcesim_instance",
    "aws": "aws_instance",
    "openstack": "openstack_compute_instance_v2",
}


def instance_address(module: str, key: str) -> str:
    """The address of instance ``key`` in a root of ``module``, as ``terraform import`` takes it."""
    kind = MODULE_INSTANCE_TYPES.get(module, "")
    return f'module.instances.{kind}.this["{key}"]'
