"""A fake cloud behind the fake Terraform engine, a fake controller view, and a scanner over both.

``CloudEngine`` is :class:`tffake.FakeEngine` whose refresh-only plans show what a cloud would:
``resource_drift`` deletes for the state's instances the cloud no longer has, and the module's
``tagged`` listing of every object carrying the cluster's tag (managed instances, objects made
out of band, recently terminated ones with their reason). ``import_resource`` adopts an object
into the state, as ``terraform import`` does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tffake import FakeEngine, FakeFence, FakeHosts, MemoryFacts, unit_ops

from orchestrator.clients.controller.types import ControllerStatus, DemandSnapshot, HostInfo, LeaseInfo
from orchestrator.clients.terraform.messages import ResourceChange
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ControllerError, TerraformError
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact
from orchestrator.ops.executor import Executor, OpParts, Wired
from orchestrator.orphans.scan import OrphanScanner

NOW = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"


@dataclass
class CloudObj:
    """One object of the fake cloud."""

    id: str
    name: str
    tags: dict[str, str]
    state: str = "running"
    state_reason: str = ""
    address: str = ""
    launch_time: str = LONG_AGO

    def listed(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "address": self.address,
            "tags": self.tags,
            "state": self.state,
            "state_reason": self.state_reason,
            "launch_time": self.launch_time,
        }


class CloudEngine(FakeEngine):
    """The fake engine with a cloud: out-of-band objects, deletes, reclaims, an API that fails."""

    def __init__(self, cluster: str = "unit") -> None:
        super().__init__()
        self.cluster = cluster
        self.extra: dict[str, CloudObj] = {}
        self.gone: dict[str, str] = {}  # id → reason the cloud ended it
        self.fail_reads = False
        self.listing_supported = True
        self.refresh_plans = 0

    def objects(self, workdir: Path) -> list[CloudObj]:
        out = []
        for inst in self.state(workdir)["instances"].values():
            reason = self.gone.get(inst["id"])
            state = "terminated" if reason is not None else "running"
            out.append(
                CloudObj(inst["id"], inst["name"], dict(inst["tags"]), state, reason or "", f"10.0.0.{len(out) + 2}")
            )
        return out

    def plan(self, workdir: Path, *args: Any, **kwargs: Any) -> Any:
        refresh_only = bool(kwargs.get("refresh_only"))
        if refresh_only:
            self.refresh_plans += 1
            if self.fail_reads:
                raise TerraformError("Error: InternalError: simulated API failure during read (error rate 1)")
        result = super().plan(workdir, *args, **kwargs)
        if not refresh_only:
            return result
        drift = tuple(
            ResourceChange(
                f'module.instances.xcesim_instance.this["{key}"]',
                "module.instances",
                "xcesim_instance",
                "this",
                key,
                "delete",
            )
            for key, inst in self.state(workdir)["instances"].items()
            if inst["id"] in self.gone
        )
        return dataclasses.replace(result, drift=drift)

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        doc = super().show_plan(workdir, plan_file)
        drift = [
            {
                "mode": "managed",
                "type": "xcesim_instance",
                "address": f'module.instances.xcesim_instance.this["{key}"]',
                "index": key,
                "change": {"actions": ["delete"], "before": {"id": inst["id"]}, "after": None},
            }
            for key, inst in self.state(workdir)["instances"].items()
            if inst["id"] in self.gone
        ]
        shard0 = workdir.parent.name != "shards"
        listed = [o for o in self.objects(workdir) if shard0] + (list(self.extra.values()) if shard0 else [])
        supported = self.listing_supported and shard0
        tagged = {o.id: o.listed() for o in listed if o.tags.get(owner.CLUSTER) == self.cluster} if supported else {}
        doc["resource_drift"] = drift
        doc["planned_values"] = {"outputs": {"tagged_supported": {"value": supported}, "tagged": {"value": tagged}}}
        return doc

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        self.calls.append(("import", workdir))
        key = address.split('["', 1)[1].rstrip('"]')
        obj = self.extra.pop(resource_id)
        state = self.state(workdir)
        state["instances"][key] = {"id": obj.id, "name": obj.name, "address": obj.address, "tags": obj.tags}
        self._write_state(workdir, state["instances"])

    def delete_out_of_band(self, instance_id: str, reason: str = "out-of-band-delete") -> None:
        self.gone[instance_id] = reason


@dataclass
class FakeController:
    """The controller's view for the scan: status, hosts, facts (from the executor's memory)."""

    facts_log: MemoryFacts
    hosts_list: list[HostInfo] = field(default_factory=list)
    term: int = 3
    term_started: float = NOW - 3600
    reachable: bool = True
    leases: tuple[LeaseInfo, ...] = ()

    def connected(self) -> bool:
        return self.reachable

    def status(self) -> ControllerStatus:
        if not self.reachable:
            raise ControllerError("controller unreachable")
        return ControllerStatus(
            "ctl",
            self.term,
            "",
            self.leases,
            DemandSnapshot(seq=0, term=self.term, time=NOW, templates=()),
            (),
            term_started=self.term_started,
        )

    def hosts(self) -> list[HostInfo]:
        if not self.reachable:
            raise ControllerError("controller unreachable")
        return list(self.hosts_list)

    def facts(self, provider: str) -> list[Fact]:
        if not self.reachable:
            raise ControllerError("controller unreachable")
        return self.facts_log.facts(provider)

    def expected(self, fact_log: MemoryFacts, state: str = "expected", joined_at: float = 0.0) -> None:
        """A host record per expectedHost fact (as the controller makes them), in ``state``."""
        for f in fact_log.committed:
            if f.kind == "expectedHost":
                self.hosts_list.append(
                    HostInfo(
                        f.host_name,
                        state,
                        f.instance_id,
                        f.instance_key,
                        f.op_id,
                        f.provider,
                        f.template,
                        f.address,
                        join_deadline=f.join_deadline,
                        joined_at=joined_at,
                    )
                )

    def set_state(self, key: str, state: str, joined_at: float = 0.0) -> None:
        self.hosts_list = [
            replace(h, state=state, joined_at=joined_at) if h.instance_key == key else h for h in self.hosts_list
        ]


@dataclass
class World:
    """An executor over the fake cloud, its facts, the controller's view and a scanner."""

    loaded: LoadedConfig
    engine: CloudEngine
    facts: MemoryFacts
    fence: FakeFence
    controller: FakeController
    ops: Wired
    now: float = NOW

    @property
    def executor(self) -> Executor:
        return self.ops.executor

    @property
    def parts(self) -> OpParts:
        return self.ops.parts

    def scanner(self) -> OrphanScanner:
        config = self.parts.config
        return OrphanScanner(config, self.ops, self.controller, lambda: self.now, config.state_dir)

    def create(self, count: int) -> list[str]:
        """``count`` hosts through the executor (with a join deadline already past at NOW)."""
        result = self.executor.create("sim", "cpu", count)
        return [c.key for c in result.created]

    def audit(self) -> list[dict[str, Any]]:
        path = self.loaded.config.state_dir / "audit.log"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def kinds(self) -> list[str]:
        return self.facts.kinds()


def world(loaded: LoadedConfig) -> World:
    engine = CloudEngine(loaded.config.cluster)
    facts, fence = MemoryFacts(), FakeFence()
    ops = unit_ops(loaded, engine, facts=facts, fence=fence, hosts=FakeHosts(), clock=lambda: NOW - 7200)
    return World(loaded, engine, facts, fence, FakeController(facts), ops)
