"""testinfra tests of bootstrapped hosts; they run only against hosts (Molecule's verify step or
``pytest tests/infra --hosts=ansible://all --ansible-inventory=INV``), never against this machine."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("hosts", default=None) or config.getoption("ansible_inventory", default=None):
        return
    skip = pytest.mark.skip(reason="testinfra tests need --hosts / --ansible-inventory (Molecule verify)")
    for item in items:
        if "tests/infra/" in str(item.path).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture
def baked(host: Any) -> bool:
    """Whether the role ran on ``host`` in bake mode (its inventory variable)."""
    return bool(host.ansible.get_variables().get("xce_node_manager_bake", False))
