"""The model cloud of a replay: instances by key, made and ended at the virtual clock's time.

Shared by the model Terraform engine (:mod:`.engine`: an apply creates, starts, stops and
deletes here, refused where the :class:`~orchestrator.replay.model.WorldModel`'s windows say)
and the runner (:mod:`.runner`: a loss reclaims here; the model controller learns of a host's
instance here). Knows nothing of Terraform or of the controller.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

RUNNING = "running"
STOPPED = "stopped"
TERMINATED = "terminated"


@dataclass
class ModelInstance:
    """One instance: identity and tags as the render asked, its offering, its life."""

    key: str
    provider: str
    instance_id: str
    name: str
    tags: Mapping[str, str]
    offering: str  # flavor[@zone][@subnet] as rendered
    launched: float
    state: str = RUNNING
    ended: float | None = None
    reason: str = ""  # why the cloud ended it (``spot-reclaim``); "" when asked to

    @property
    def template(self) -> str:
        return self.tags.get("xce:template", "")

    @property
    def live(self) -> bool:
        return self.state != TERMINATED


@dataclass
class ModelCloud:
    """Every instance ever made in the replay, by instance key (never forgotten: the figures
    and the listing read ended ones too)."""

    instances: dict[str, ModelInstance] = field(default_factory=dict)
    made: int = 0  # instances created (ids are numbered from it)

    def live(self, provider: str | None = None) -> Iterator[ModelInstance]:
        """Live instances (of ``provider``), oldest first."""
        for inst in self.instances.values():
            if inst.live and (provider is None or inst.provider == provider):
                yield inst

    def create(
        self, key: str, provider: str, name: str, tags: Mapping[str, str], offering: str, now: float
    ) -> ModelInstance:
        """Make the instance ``key`` now (a key made before and ended is made again, new id)."""
        self.made += 1
        inst = ModelInstance(key, provider, f"m-{self.made:08d}", name, dict(tags), offering, now)
        self.instances[key] = inst
        return inst

    def end(self, key: str, now: float, reason: str = "") -> ModelInstance | None:
        """End the live instance ``key`` (deleted when asked, ``reason`` when the cloud took it)."""
        inst = self.instances.get(key)
        if inst is None or not inst.live:
            return None
        inst.state, inst.ended, inst.reason = TERMINATED, now, reason
        return inst
