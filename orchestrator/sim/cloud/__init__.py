"""The simulated cloud: a durable SQLite store and the ``xcesim`` Terraform provider over it."""

from orchestrator.sim.cloud.store import (
    CloudApiError,
    CloudError,
    CloudStore,
    FaultSettings,
    Instance,
    InstanceNotFound,
    InsufficientCapacity,
)

__all__ = [
    "CloudApiError",
    "CloudError",
    "CloudStore",
    "FaultSettings",
    "Instance",
    "InstanceNotFound",
    "InsufficientCapacity",
]
