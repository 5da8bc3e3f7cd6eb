"""Where facts go: the controller (through the link), or a local journal in standalone mode.

Both are idempotent per ``(kind, op_id, instance_key)`` as the controller is, so a resumed op
that commits a fact again does not duplicate it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Protocol

from orchestrator import durable
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.errors import FinalError
from orchestrator.model.facts import Epoch, Fact, FactKind


class FactLog(Protocol):
    """Commits facts and lists a provider's facts."""

    def commit(self, fact: Fact) -> None:
        """Commit ``fact`` durably (``LeaseLost`` when the controller refuses its epoch)."""
        ...

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider``, oldest first."""
        ...


class LinkFacts:
    """Facts at the controller, over the controller link."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    def commit(self, fact: Fact) -> None:
        """``commitFact``."""
        self.link.commit_fact(fact)

    def facts(self, provider: str) -> list[Fact]:
        """``queryFacts`` (all pages)."""
        return sorted(self.link.query_facts(provider), key=lambda f: f.fact_id)


class LocalFacts:
    """Standalone mode: facts in a local JSON-lines journal (0600, fsync'd per fact)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> list[Fact]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out: list[Fact] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw: dict[str, Any] = json.loads(line)
                raw["kind"] = FactKind(raw["kind"])
                raw["epoch"] = Epoch(*raw["epoch"])
                out.append(Fact(**raw))
            except (ValueError, KeyError, TypeError) as exc:
                # A torn last line (a crash mid-write) is the only expected damage; anything
                # else is reported, never skipped silently.
                if number == len(lines):
                    break
                raise FinalError(f"{self.path}:{number}: unreadable fact: {exc}") from None
        return out

    def commit(self, fact: Fact) -> None:
        """Append ``fact`` unless the same kind, op and key is already there."""
        known = self._read()
        if any((f.kind, f.op_id, f.instance_key) == (fact.kind, fact.op_id, fact.instance_key) for f in known):
            return
        stored = dataclasses.replace(fact, fact_id=len(known) + 1)
        value = dataclasses.asdict(stored)
        value["kind"] = str(stored.kind)
        value["epoch"] = [stored.epoch.term, stored.epoch.seq]
        durable.private_dir(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, durable.PRIVATE_FILE)
        try:
            os.write(fd, (json.dumps(value, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def facts(self, provider: str) -> list[Fact]:
        """The journal's facts of ``provider``."""
        return [f for f in self._read() if f.provider == provider]


class NoFacts:
    """A dry run's fact log: reads nothing, refuses every commit."""

    def commit(self, fact: Fact) -> None:
        """Refused: a dry run records nothing."""
        raise FinalError(f"a dry run commits no facts (tried {fact.kind} of op {fact.op_id})")

    def facts(self, provider: str) -> list[Fact]:
        """None."""
        return []
