"""Join tracking reads first-boot hosts' results: a failed boot counts like a failed bootstrap.

What a user would notice: a first-boot host whose console says it failed is recorded as given
up with the step and the host's message, counted by its template's breaker as a bootstrap
failure and returned with the reason ``first boot failed``; other outcomes are recorded and
audited once each (not every pass); pushed hosts' consoles are never read.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconcile_support import FakeClock, site

from orchestrator.model.bootresult import FirstBootKind, FirstBootOutcome
from orchestrator.model.config import BreakerSettings, Config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.executor import Created
from orchestrator.reconcile.bootstraps import BootstrapRecord, BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.firstboot import FIRST_BOOT_FAILED, joined_record, read_first_boot
from orchestrator.reconcile.results import JoinResult

SITE = """
controller: {ca: system, join_key: join.key}
providers:
  sim: {module: xcesim, max_instances: 10}
templates:
  cpu:
    bootstrap: {mode: first-boot}
    providers: {sim: {flavor: c8.large, image: debian-12}}
  gpu:
    providers: {sim: {flavor: g4.xlarge, image: debian-12}}
"""


def expected(n: int, template: str = "cpu") -> Fact:
    return Fact(
        FactKind.EXPECTED_HOST,
        "sim",
        "op-1",
        Epoch(1, 1),
        instance_key=f"op-1-{n:03d}",
        instance_id=f"i-{n}",
        template=template,
        host_name=f"{template}-{n}",
        join_deadline=2_000_000.0,
    )


@dataclass
class Phases:
    """The host phases as join tracking's first-boot part uses them."""

    config: Config
    tracker: BootstrapTracker
    breakers: Breakers
    clock: Callable[[], float]
    first_boot: FirstBootOutcomes | None
    rng: random.Random = field(default_factory=random.Random)
    audits: list[dict[str, Any]] = field(default_factory=list)
    returned: list[tuple[str, list[str], str]] = field(default_factory=list)

    def audit(self, action: str, **details: Any) -> None:
        self.audits.append({"action": action, **details})

    def give_back(self, provider: str, keys: Sequence[str], reason: str, errors: list[str]) -> str:
        self.returned.append((provider, list(keys), reason))
        return "op-return-1"


class Reads:
    def __init__(self, outcomes: dict[str, FirstBootOutcome]) -> None:
        self.outcomes = outcomes
        self.asked: list[list[str]] = []

    def __call__(self, provider: str, hosts: Sequence[Created]) -> Mapping[str, FirstBootOutcome]:
        self.asked.append([h.key for h in hosts])
        return {h.key: self.outcomes[h.key] for h in hosts if h.key in self.outcomes}


def phases(tmp_path: Path, reads: FirstBootOutcomes | None) -> Phases:
    clock = FakeClock()
    breakers = Breakers.load(tmp_path, BreakerSettings(failures=1, window=600, cool_off=3600))
    return Phases(site(SITE), BootstrapTracker.load(tmp_path), breakers, lambda: clock.now, reads)


FAILED = FirstBootOutcome(FirstBootKind.FAILED, "join", "token refused")
STARTED = FirstBootOutcome(FirstBootKind.STARTED)


def test_a_failed_first_boot_is_given_up_counted_and_returned(tmp_path: Path) -> None:
    reads = Reads({"op-1-000": FAILED, "op-1-001": STARTED})
    p = phases(tmp_path, reads)
    evidence = JoinResult()
    read_first_boot(p, "sim", [expected(0), expected(1), expected(2, "gpu")], evidence)
    assert reads.asked == [["op-1-000", "op-1-001"]]  # the pushed gpu host is not read
    failed = p.tracker.get("op-1-000", "sim", "cpu", "cpu-0")
    assert failed.gave_up and failed.attempts == 1
    assert failed.outcome == "failed: first boot failed at step join: token refused"
    assert (failed.first_boot, failed.first_boot_line) == ("failed", "failed at step join: token refused")
    started = p.tracker.get("op-1-001", "sim", "cpu", "cpu-1")
    assert (started.first_boot, started.outcome, started.gave_up) == ("started", "", False)
    assert p.returned == [("sim", ["op-1-000"], FIRST_BOOT_FAILED)]
    [state] = p.breakers.states()
    # Counted like a failed push bootstrap: with ``failures: 1`` the template's breaker opens.
    assert (state.template, state.position.value) == ("cpu", "open")
    assert "cpu-0: failed: first boot failed at step join" in state.reason
    assert [a["action"] for a in p.audits] == ["reconcile-first-boot", "reconcile-bootstrap-gave-up"]
    assert p.audits[0]["hosts"]["cpu-0"] == {"outcome": "failed", "step": "join", "message": "token refused"}
    assert [f.key for f in evidence.first_boot_failed] == ["op-1-000"]
    assert evidence.to_json()["first_boot_failed"] == [
        {
            "provider": "sim",
            "template": "cpu",
            "host": "cpu-0",
            "key": "op-1-000",
            "step": "join",
            "message": "token refused",
            "op": "op-return-1",
        }
    ]
    assert evidence.first_boot == {"cpu-0": "failed at step join: token refused", "cpu-1": "started, not joined"}
    assert evidence.returned == []  # not a join_deadline return
    # On disk, for the status file and a restarted daemon.
    doc = json.loads((tmp_path / "bootstrap.json").read_text())
    assert doc["hosts"]["op-1-000"]["first_boot"] == "failed"

    # The next pass: the given-up host is not read again; an unchanged outcome writes nothing.
    p.audits.clear()
    read_first_boot(p, "sim", [expected(0), expected(1)], JoinResult())
    assert reads.asked[-1] == ["op-1-001"]
    assert p.audits == [] and len(p.returned) == 1


def test_no_reader_or_a_failing_reader_changes_nothing(tmp_path: Path) -> None:
    p = phases(tmp_path, None)
    read_first_boot(p, "sim", [expected(0)], JoinResult())
    assert p.tracker.records() == []

    def broken(provider: str, hosts: Sequence[Created]) -> Mapping[str, FirstBootOutcome]:
        raise RuntimeError("boom")

    p = phases(tmp_path, broken)
    evidence = JoinResult()
    read_first_boot(p, "sim", [expected(0)], evidence)
    assert evidence.errors == ["first-boot results on sim: RuntimeError: boom"]
    assert p.tracker.records() == [] and p.audits == []


def test_a_joined_first_boot_host_is_recorded_joined() -> None:
    config = site(SITE)
    record = BootstrapRecord("op-1-000", "sim", "cpu", "cpu-0")
    assert joined_record(config, record).first_boot == "joined"
    pushed = BootstrapRecord("op-1-001", "sim", "gpu", "gpu-1")
    assert joined_record(config, pushed) == pushed
