"""Helpers of the reconcile tests: a site configuration, a fact log, a fake clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.configfile import parse_config
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.pool import FILL_DETAIL, start_detail

EPOCH = Epoch(1, 1)


def site(text: str) -> Config:
    """A configuration from YAML text (``cluster`` and ``controller.ca`` are added unless it
    has its own ``controller``)."""
    controller = "" if text.lstrip().startswith("controller:") else "controller: {ca: system}\n"
    return parse_config("cluster: site1\n" + controller + text, "site.yaml", Path("/")).config


@dataclass
class FakeClock:
    """Wall-clock seconds the test moves by hand."""

    now: float = 1_000_000.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class FactLog:
    """Facts as the controller would commit them: increasing ids, commit times from the clock."""

    clock: FakeClock
    facts: list[Fact] = field(default_factory=list)

    def _commit(self, kind: FactKind, provider: str, op_id: str, **values: Any) -> Fact:
        fact = Fact(kind, provider, op_id, EPOCH, fact_id=len(self.facts) + 1, committed=self.clock.now, **values)
        self.facts.append(fact)
        return fact

    def intent(self, op_id: str, provider: str, template: str, count: int, detail: str = "") -> list[str]:
        """A ``requestIntent``; returns the op's instance keys."""
        self._commit(FactKind.REQUEST_INTENT, provider, op_id, template=template, count=count, detail=detail)
        return [instance_key(op_id, i) for i in range(count)]

    def pool(self, op_id: str, provider: str, template: str, count: int) -> list[str]:
        """A warm-pool fill op whose instances were all made (``instanceCreated`` only)."""
        keys = self.intent(op_id, provider, template, count, detail=FILL_DETAIL)
        for key in keys:
            self.created(key, provider, template, expected=False)
        return keys

    def start(self, op_id: str, provider: str, template: str, keys: Sequence[str], expected: bool = True) -> None:
        """A warm-pool start op's intent naming ``keys`` (and, by default, their ``expectedHost``)."""
        self._commit(FactKind.REQUEST_INTENT, provider, op_id, template=template, detail=start_detail(keys))
        for key in keys if expected else ():
            common = {"instance_key": key, "instance_id": f"i-{key}", "template": template, "host_name": f"h-{key}"}
            self._commit(FactKind.EXPECTED_HOST, provider, op_id, join_deadline=self.clock.now + 900, **common)

    def created(self, key: str, provider: str, template: str, expected: bool = True) -> None:
        """``instanceCreated`` and (by default) ``expectedHost`` for ``key``."""
        op_id = key.rsplit("-", 1)[0]
        common = {"instance_key": key, "instance_id": f"i-{key}", "template": template, "host_name": f"h-{key}"}
        self._commit(FactKind.INSTANCE_CREATED, provider, op_id, **common)
        if expected:
            self._commit(FactKind.EXPECTED_HOST, provider, op_id, join_deadline=self.clock.now + 900, **common)

    def gone(self, key: str, provider: str, template: str, kind: FactKind = FactKind.RETURNED) -> None:
        """``returned`` (or ``lost``) for ``key``."""
        self._commit(kind, provider, key.rsplit("-", 1)[0], instance_key=key, template=template)
