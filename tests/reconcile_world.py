"""A simulated world for reconcile-pass tests: a controller process, the simulated cloud, a Reconciler.

The controller runs in its own process (``sim_controller_helpers.controller_process``); the
cloud is the xcesim module behind real Terraform, its store in the site's state directory. The
orchestrator side is built the way the daemon builds it: one controller link kept up in the
background (reconnects and resyncs after a failover), an in-process lease manager for the
providers, an executor without a bootstrap play, and a :class:`Reconciler` on a clock the test
moves (wall time plus a skew, so it stays comparable with the controller's times).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim_controller_helpers import (
    ProtoClient,
    connect,
    controller_block,
    controller_process,
    join_worker,
    worker_token,
)
from sim_world_helpers import agree

from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import Fact
from orchestrator.configfile import load_config
from orchestrator.model.config import Config
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.executor import Bootstrap, Created, Executor, OpParts, Wired
from orchestrator.ops.facts import LinkFacts
from orchestrator.ops.hosts import LinkHosts
from orchestrator.reconcile.loop import PassReport, Reconciler
from orchestrator.reconcile.view import LinkView
from orchestrator.sim.cloud.store import CloudStore, Instance
from orchestrator.workspace.terraform import engine_for

__all__ = ["World", "agree", "reconcile_world"]

ROOT = Path(__file__).resolve().parents[1]
TTL = 4.0
CLUSTER = "rtest"


@dataclass
class SkewClock:
    """Wall-clock seconds plus a skew the test advances (time passes without waiting)."""

    skew: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew

    def advance(self, seconds: float) -> None:
        self.skew += seconds


@dataclass
class World:
    """The controller, the site, the orchestrator's link, lease manager, executor and reconciler."""

    ctl_state: Path
    address: str
    site: Path
    clock: SkewClock
    link: ControllerLink
    leases: LeaseManager
    ops: Wired  # the executor and its parts
    reconciler: Reconciler
    workers: list[ProtoClient] = field(default_factory=list)
    cluster: str = CLUSTER

    @property
    def executor(self) -> Executor:
        return self.ops.executor

    @property
    def store(self) -> CloudStore:
        return CloudStore(self.site / "state" / "sim" / "cloud.sqlite")

    def alive(self) -> dict[str, Instance]:
        """Live instances of the cluster in the simulated cloud, by instance key."""
        return {i.client_token: i for i in self.store.list_instances({"xce:cluster": CLUSTER})}

    def facts(self) -> list[Fact]:
        """Every fact of every provider, asked of the controller now."""
        providers = sorted(self.reconciler.config.providers)
        return sorted((f for p in providers for f in self.link.query_facts(p)), key=lambda f: f.fact_id)

    def audit(self) -> list[dict[str, Any]]:
        path = self.site / "state" / "audit.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def passes(
        self, n: int, trigger: str = "interval", until: Callable[[PassReport], bool] | None = None
    ) -> list[PassReport]:
        """Up to ``n`` passes (fewer when ``until`` holds after one)."""
        out: list[PassReport] = []
        for _ in range(n):
            report = self.reconciler.run_once(trigger)
            out.append(report)
            if until is not None and until(report):
                break
        return out

    def wait_lease(self, provider: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.leases.valid(provider):
            assert time.monotonic() < deadline, f"no lease for {provider}"
            time.sleep(0.1)

    def wait_demand(self, check: Callable[[Mapping[str, int]], bool], timeout: float = 20.0) -> None:
        """Until the link's newest snapshot's ``wanted`` per template satisfies ``check``."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.link.demand()
            wanted = {t.template: t.wanted for t in snap.templates} if snap else {}
            if snap is not None and check(wanted):
                return
            assert time.monotonic() < deadline, f"demand never matched; last {wanted}"
            time.sleep(0.05)

    def join(self, made: Created | Fact) -> ProtoClient:
        """Make the host's worker join the controller (the way a bootstrapped host would)."""
        key = made.key if isinstance(made, Created) else made.instance_key
        name = made.name if isinstance(made, Created) else made.host_name
        host, port = self.address.rsplit(":", 1)
        worker = connect((host, int(port)), self.ctl_state / "tls" / "ca.pem")
        token = worker_token(self.ctl_state, key, name)
        reply = join_worker(worker, name, made.instance_id, token=token, instance_key=key)
        assert reply.kind == "joined", reply.body
        self.workers.append(worker)
        return worker


def site_config(
    ctl_state: Path, address: str, providers: Mapping[str, Any], templates: Mapping[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "cluster": CLUSTER,
        "state_dir": "state",
        "terraform": {"parallelism": 4},
        # With the controller's join key: a first-boot template needs it (its hosts' tokens).
        "controller": {
            **controller_block(ctl_state, address, "daemon"),
            "join_key": str(ctl_state / "tls" / "join.key"),
        },
        "providers": dict(providers),
        "templates": dict(templates),
        **extra,
    }


ONE_PROVIDER = {"sim": {"module": "xcesim", "max_instances": 20}}
CPU = {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}}


@contextlib.contextmanager
def reconcile_world(
    tmp_path: Path,
    *,
    providers: Mapping[str, Any] = ONE_PROVIDER,
    templates: Mapping[str, Any] = CPU,
    bootstrap: Bootstrap | None = None,
    first_boot: Callable[[Config], FirstBootOutcomes] | None = None,
    seed: int = 7,
    root: Path = ROOT,
    **extra: Any,
) -> Iterator[World]:
    """The world above, torn down on exit (workers, leases, link, controller process).

    ``root``: the toolkit tree the executor takes its Terraform and templates from;
    ``first_boot``: makes the reader of first-boot results from the site's configuration.
    """

    with controller_process(tmp_path, ttl=TTL, heartbeat=60) as (ctl_state, address, _proc):
        site = tmp_path / "site"
        site.mkdir()
        (site / "xceprov.yaml").write_text(json.dumps(site_config(ctl_state, address, providers, templates, **extra)))
        config = load_config(str(site / "xceprov.yaml")).config
        names = sorted(config.providers)
        instance_id = f"{CLUSTER}-daemon-test"
        link = ControllerLink(config.controller, instance_id=instance_id, providers=names, cluster=CLUSTER)
        leases = LeaseManager(link, names, margin=0.5, holder_id=instance_id)
        join_lease_manager(link, leases)
        link.start()
        leases.start()
        clock = SkewClock()
        workers: list[ProtoClient] = []
        try:
            assert link.wait_connected(20), "the link never joined"
            engine = engine_for(config)
            ops = Wired.of(OpParts(config, root, engine, leases, LinkFacts(link), LinkHosts(link), clock=clock))
            reconciler = Reconciler(
                config,
                ops,
                LinkView(link),
                clock=clock,
                state_dir=config.state_dir,
                rng=random.Random(seed),
                bootstrap=bootstrap,
                first_boot=first_boot(config) if first_boot is not None else None,
            )
            world = World(ctl_state, address, site, clock, link, leases, ops, reconciler, workers)
            for name in names:
                world.wait_lease(name)
            yield world
        finally:
            for worker in workers:
                worker.close()
            leases.close(release=True)
            link.close()
