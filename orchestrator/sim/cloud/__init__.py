"""The simulated cloud: a durable SQLite store and the ``xcesim`` Terraform provider over it."""

from orchestrator.sim.cloud.errors import CloudApiError, CloudError, InstanceNotFound, InsufficientCapacity
from orchestrator.sim.cloud.faults import FaultSettings
from orchestrator.sim.cloud.records import Instance
from orchestrator.sim.cloud.store import CloudStore

__all__ = [
    "CloudApiError",
    "CloudError",
    "CloudStore",
    "FaultSettings",
    "Instance",
    "InstanceNotFound",
    "InsufficientCapacity",
]
