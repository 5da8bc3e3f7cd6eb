"""The facts of a replay's controller: numbered, idempotent, and what the pass reads of them.

Every fact is kept (:meth:`FactBook.all_facts`: the figures' ledger). What the pass reads
(:meth:`FactBook.facts`) leaves out, ``keep_gone`` after the last of them went, the facts of a
create (or warm-pool start) op all of whose instances are gone (returned or lost), with every
fact of those instances (their ``returning`` and ``lost`` facts too): the one liberty the replay's
controller takes, for speed (``controller.py`` says why it changes no decision).
"""

from __future__ import annotations

import dataclasses

from orchestrator.clients.controller.types import Fact
from orchestrator.model.facts import GONE_KINDS, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.pool import start_keys

HOLDER = "replay"


class FactBook:
    """Facts by provider, idempotent per ``(kind, op, key)`` as the controller's, ids increasing."""

    def __init__(self) -> None:
        self._all: dict[str, list[Fact]] = {}
        self._view: dict[str, list[Fact]] = {}
        self._ids: set[tuple[str, str, str]] = set()
        self._count = 0
        self._op_keys: dict[str, tuple[str, ...]] = {}  # create (or start) op → the keys its intent names
        self._ops_of_key: dict[str, list[str]] = {}
        self._gone: set[str] = set()

    def add(self, fact: Fact, now: float) -> Fact | None:
        """``fact`` numbered and stamped ``now``, or None when the same kind, op and key is known."""
        identity = (str(fact.kind), fact.op_id, fact.instance_key)
        if identity in self._ids:
            return None
        self._ids.add(identity)
        self._count += 1
        stored = dataclasses.replace(fact, fact_id=self._count, committed=now, holder=HOLDER)
        self._all.setdefault(fact.provider, []).append(stored)
        self._view.setdefault(fact.provider, []).append(stored)
        return stored

    def all_gone(self, fact: Fact) -> list[str]:
        """Note an intent's keys, or a key gone; the ops whose keys ``fact`` made all gone."""
        if fact.kind == FactKind.REQUEST_INTENT:
            keys = start_keys(fact.detail)
            named = tuple(keys) if keys is not None else tuple(instance_key(fact.op_id, i) for i in range(fact.count))
            self._op_keys[fact.op_id] = named
            for key in named:
                self._ops_of_key.setdefault(key, []).append(fact.op_id)
            return []
        if fact.kind not in GONE_KINDS or not fact.instance_key:
            return []
        self._gone.add(fact.instance_key)
        ops = self._ops_of_key.get(fact.instance_key, ())
        return [op for op in ops if op in self._op_keys and all(k in self._gone for k in self._op_keys[op])]

    def forget(self, provider: str, op_id: str) -> None:
        """The op's facts, and its keys', leave what the pass reads."""
        keys = set(self._op_keys.pop(op_id, ()))
        view = self._view.get(provider, [])
        self._view[provider] = [f for f in view if f.op_id != op_id and f.instance_key not in keys]

    def facts(self, provider: str) -> list[Fact]:
        """What the pass reads of ``provider``'s facts, oldest first."""
        return list(self._view.get(provider, ()))

    def all_facts(self) -> dict[str, list[Fact]]:
        """Provider → every fact, oldest first."""
        return {p: list(f) for p, f in self._all.items()}
