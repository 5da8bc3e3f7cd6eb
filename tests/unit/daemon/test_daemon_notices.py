"""Spot interruption notices acted on (docs/daemon.md, "Spot interruption notices"), on a fake clock.

What a user would notice: a notice closes the host at the controller once and wakes a pass; the
noticed host stops counting as supply, so that pass asks for a replacement; the loss is recorded
once, when the reclaim happens (never at the notice); the status shows the noticed host; the
metrics count it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reconcile"))
from reconcile_support import FakeClock
from tffake import FakeEngine, FakeFence, FakeHosts, MemoryFacts, site_config, unit_ops

from orchestrator.clients.controller.types import DemandSnapshot, HostInfo, TemplateDemand
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.noticewatch import NoticeMetrics, NoticeWatch
from orchestrator.daemon.statusdoc import build_document
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.losses import observer_for
from orchestrator.ops.notices import NoticeReader
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.loop import Reconciler
from orchestrator.reconcile.noticebook import NoticeBook, noticed_rows
from orchestrator.services.status_text import notice_lines
from orchestrator.workspace.documents import LocalDocuments

EPOCH = Epoch(3, 7)


class View:
    """The controller as a pass reads it; ``in_flight`` counts expected hosts not gone and not noticed."""

    def __init__(self, facts: MemoryFacts, hosts: FakeHosts, wanted: int) -> None:
        self.facts_log, self.host_log, self.wanted = facts, hosts, wanted
        self.noticed: set[str] = set()
        self.time = 0.0

    def demand(self) -> DemandSnapshot:
        facts = self.facts_log.committed
        gone = {f.instance_key for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
        expected = [
            f
            for f in facts
            if f.kind == FactKind.EXPECTED_HOST and f.instance_key not in gone and f.instance_id not in self.noticed
        ]
        return DemandSnapshot(1, 1, self.time, (TemplateDemand("cpu", self.wanted, in_flight=len(expected)),))

    def hosts(self) -> list[HostInfo]:
        return self.host_log.hosts("sim")

    def facts(self, provider: str) -> list[Fact]:
        return self.facts_log.facts(provider)

    def connected(self) -> bool:
        return True


class Link:
    """The controller's side of ``hostNotice``: records each call, answers ``closed`` at its clock."""

    def __init__(self, clock: FakeClock, view: View) -> None:
        self.clock, self.view = clock, view
        self.calls: list[dict[str, Any]] = []

    def notice_host(self, provider: str, epoch: Epoch, **kw: Any) -> tuple[str, float]:
        self.calls.append({"provider": provider, "epoch": epoch, **kw})
        self.view.noticed.add(kw["instance_id"])
        return "closed", self.clock.now


class Cloud:
    """The simulated cloud's notices as the reader returns them."""

    def __init__(self) -> None:
        self.notices: list[dict[str, Any]] = []

    def read(self, config: Config, provider: str) -> list[dict[str, Any]]:
        return [dict(n) for n in self.notices]


def test_a_notice_closes_the_host_once_a_replacement_is_asked_for_and_the_loss_is_recorded_once(
    tmp_path: Path,
) -> None:
    loaded = site_config(tmp_path)
    config = loaded.config
    engine, clock, facts, hosts = FakeEngine(), FakeClock(), MemoryFacts(), FakeHosts()
    # The product's own host-loss check (observer_for): the cloud's listing says why a host went.
    ops = unit_ops(
        loaded, engine, facts=facts, hosts=hosts, clock=lambda: clock.now, fence=FakeFence(), losses=observer_for
    )
    view = View(facts, hosts, wanted=2)
    reconciler = Reconciler(config, ops, view, clock=lambda: clock.now, state_dir=config.state_dir)  # type: ignore[arg-type]
    first = reconciler.run_once()
    assert len(first.ops) == 1
    keys = sorted(f.instance_key for f in facts.committed if f.kind == FactKind.EXPECTED_HOST)
    assert len(keys) == 2
    view.wanted = 0  # the controller nets the two hosts out: nothing pending beyond them
    view.time = clock.now

    cloud, link, wakes, metrics = Cloud(), Link(clock, view), [], DaemonMetrics()
    book = NoticeBook(LocalDocuments(config.state_dir))
    watch = NoticeWatch(
        reader=NoticeReader(lambda: config, {"xcesim": cloud.read}, clock=lambda: clock.now),
        link=link,  # type: ignore[arg-type]
        book=book,
        leases=lambda: {"sim": EPOCH},
        facts=facts.facts,
        wake=wakes.append,
        state_dir=str(config.state_dir),
        interval=lambda: 5.0,
        metrics=NoticeMetrics(metrics.registry),
        clock=lambda: clock.now,
    )
    noticed_id = f"i-{keys[0]}"
    cloud.notices = [
        {"instance_id": noticed_id, "noticed_at": clock.now, "reclaim_at": clock.now + 120},
        {"instance_id": "i-not-ours", "noticed_at": clock.now, "reclaim_at": clock.now + 120},
    ]
    clock.advance(3)
    acted = watch.poll()
    assert [a.instance_key for a in acted] == [keys[0]] and wakes == ["notice"]
    assert link.calls[0]["instance_id"] == noticed_id and link.calls[0]["reclaim_at"] == clock.now + 117
    assert link.calls[0]["epoch"] == EPOCH and link.calls[0]["host_name"]
    assert acted[0].closed_seconds == 3.0
    sample = metrics.registry.get_sample_value
    assert sample("xceprov_interruption_notices_total", {"provider": "sim"}) == 1
    assert sample("xceprov_notice_to_closed_seconds_count") == 1
    # Acted on once: the next reads find it in the book.
    clock.advance(5)
    assert watch.poll() == [] and len(link.calls) == 1
    audit = [json.loads(line) for line in (config.state_dir / "audit.log").read_text().splitlines()]
    assert [a["instance_id"] for a in audit if a.get("action") == "interruption-notice"] == [noticed_id]

    # The pass the notice woke: the noticed host is no supply any more; the work it ran wants a host.
    view.wanted = 1  # the controller requeued the noticed host's work
    second = reconciler.run_once("notice")
    assert second.gaps["cpu"].gap == 1 and len(second.ops) == 1
    # Not recorded lost at the notice.
    assert [f for f in facts.committed if f.kind == FactKind.LOST] == []

    # The status shows the noticed host.
    rows = noticed_rows(config)
    assert [(r["instance_id"], r["host_state"], r["lost_at"]) for r in rows] == [(noticed_id, "closed", None)]
    doc = build_document(
        daemon={},
        report=None,
        leases=[],
        breakers=Breakers.load(tmp_path, config.policy.breaker),
        facts={},
        hosts=[],
        now=clock.now,
        notices=rows,
    )
    assert doc["notices"][0]["instance_id"] == noticed_id
    assert any(noticed_id in line for line in notice_lines(tuple(rows), clock.now))

    # The reclaim: the cloud takes the instance back at its time; the loss is recorded once, then.
    assert watch.take_due_losses() == {}
    clock.advance(120)
    workdir = ops.executor.workdir("sim")
    engine.vanish(workdir.path, keys[0])
    engine.listed[noticed_id] = ("terminated", "spot-reclaim")
    cloud.notices[0]["reclaimed"] = True
    watch.poll()
    due = watch.take_due_losses()
    assert due == {"sim": [keys[0]]} and wakes[-1] == "reclaim"
    lost = ops.executor.observe_losses("sim", due["sim"], "op-loss-check")
    assert lost == [keys[0]]
    watch.settled("sim", due["sim"])
    assert ops.executor.observe_losses("sim", due["sim"], "op-loss-check-2") == []
    lost_facts = [f for f in facts.committed if f.kind == FactKind.LOST]
    assert [(f.instance_key, json.loads(f.detail)["reason"]) for f in lost_facts] == [(keys[0], "spot-reclaim")]
    assert book.entries()[noticed_id].lost_at == clock.now
    watch.poll()
    assert watch.take_due_losses() == {}  # recorded: never handed on again


def test_a_notice_of_a_host_the_controller_does_not_know_is_still_leaving(tmp_path: Path) -> None:
    loaded = site_config(tmp_path)
    config = loaded.config
    clock, facts, hosts = FakeClock(), MemoryFacts(), FakeHosts()
    ops = unit_ops(loaded, FakeEngine(), facts=facts, hosts=hosts, clock=lambda: clock.now, fence=FakeFence())
    view = View(facts, hosts, wanted=1)
    Reconciler(config, ops, view, clock=lambda: clock.now, state_dir=config.state_dir).run_once()  # type: ignore[arg-type]
    [key] = [f.instance_key for f in facts.committed if f.kind == FactKind.EXPECTED_HOST]

    class Unknown(Link):
        def notice_host(self, provider: str, epoch: Epoch, **kw: Any) -> tuple[str, float]:
            self.calls.append(kw)
            return "unknownHost", 0.0

    cloud = Cloud()
    cloud.notices = [{"instance_id": f"i-{key}", "reclaim_at": clock.now + 120}]
    book = NoticeBook(LocalDocuments(config.state_dir))
    watch = NoticeWatch(
        NoticeReader(lambda: config, {"xcesim": cloud.read}, clock=lambda: clock.now),
        Unknown(clock, view),  # type: ignore[arg-type]
        book,
        lambda: {"sim": EPOCH},
        facts.facts,
        lambda _t: None,
        str(config.state_dir),
        lambda: 5.0,
        clock=lambda: clock.now,
    )
    [entry] = watch.poll()
    assert entry.host_state == "unknownHost" and entry.controller_at == 0.0
    # The snapshot still counts it in flight (the controller never heard): the gap counts it out.
    report = Reconciler(config, ops, view, clock=lambda: clock.now, state_dir=config.state_dir).run_once()  # type: ignore[arg-type]
    assert report.gaps["cpu"].leaving == 1 and report.gaps["cpu"].gap == 1
