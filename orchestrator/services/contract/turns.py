"""One op placed at a time: a request's op is placed on a provider only while no op it would
disturb is open there.

Why: a request's call records its op's intent and grows the desired set (``Executor.place``)
and leaves the apply to its worker; the worker's plan is checked to create (or delete) exactly
its own op's keys. A second create placed before the first is applied puts its keys in the same
desired set, and the first worker's plan would also create them: refused, that request's op
left open. So a create waits while any op of its provider is open (a create's keys would be in
a return's delete plan too), and a return waits while a create is open (a return placed beside
it is planned with the create's keys); returns beside returns do not disturb each other (each
plan deletes its own keys from the state as it is).

The wait is outside the fence (reading the facts, so the worker that applies the open op takes
the fence at once), bounded by the session's ``fence_wait``; then the call is refused ``held``
(exit 9) naming the open op, and the scheduler asks again. An open op of a request whose worker
is not running (it crashed, or gave up) has its worker started again, so a request never waits
for a worker that does not exist. A create request whose call ended between its intent and
its record (a ``serve`` stopped mid-call) gets its record and its worker then. An open op that
is no request of the contract (an ``xceprov apply`` that crashed) is completed by ``xceprov ops
resume`` or a daemon, as the refusal says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.errors import LeaseHeld
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.openops import OpenOp, open_ops
from orchestrator.services.contract.ledger import contract_detail
from orchestrator.services.contract.requests import RequestRecord
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.contract.worker import worker_alive

# How often a waiting call reads the facts again.
TURN_RETRY = 1.0


def in_the_way(facts: Sequence[Fact], kind: str) -> list[OpenOp]:
    """The open ops of a provider that a new op of ``kind`` must wait for (module docstring)."""
    return [o for o in open_ops(facts) if kind == "create" or o.kind == "create"]


@dataclass
class Turn:
    """A call's wait for its turn to place an op of ``kind`` on ``providers``."""

    session: ContractSession
    providers: Sequence[str]
    kind: str
    deadline: float = field(init=False)
    nudged: set[str] = field(default_factory=set)
    # Create ops whose intent the contract recorded (``requestMachines``), seen in the facts.
    requested: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.deadline = self.session.monotonic() + self.session.fence_wait

    def blocking(self, facts_of: Sequence[Sequence[Fact]]) -> list[OpenOp]:
        """The open ops in the way, over the providers' facts."""
        for facts in facts_of:
            self.requested.update(
                f.op_id
                for f in facts
                if f.kind == FactKind.REQUEST_INTENT and contract_detail(f.detail).get("action") == "requestMachines"
            )
        return [o for facts in facts_of for o in in_the_way(facts, self.kind)]

    def wait(self, blocking: Sequence[OpenOp]) -> None:
        """Return once no op is in the way (facts read without the fence); ``LeaseHeld`` naming
        the first op still in the way when the session's ``fence_wait`` is over."""
        while blocking:
            first = blocking[0]
            self._nudge(first)
            if self.session.monotonic() >= self.deadline:
                raise self._refusal(first)
            self.session.sleep(TURN_RETRY)
            with self.session.reading() as reader:
                blocking = self.blocking([reader.parts.facts.facts(p) for p in self.providers])

    def _nudge(self, op: OpenOp) -> None:
        """Start the worker of a request's open op again when none runs (once per wait)."""
        if op.op_id in self.nudged:
            return
        self.nudged.add(op.op_id)
        records = self.session.records
        record = records.read(op.op_id)
        if record is None and op.kind == "create" and op.op_id in self.requested:
            # Its call ended between the intent and the record: the record a worker needs.
            record = RequestRecord(
                op.op_id, "create", (op.provider,), self.session.clock(), bootstrap=self.session.bootstrap
            )
            records.write(record)
        if record is not None and not worker_alive(record):
            self.session.spawn(op.op_id)  # a no-op when its worker runs (the worker lock)

    def _refusal(self, op: OpenOp) -> LeaseHeld:
        record = self.session.records.read(op.op_id)
        if record is not None:
            holder = f"request {op.op_id}"
            todo = "its worker is applying it; ask again in a moment"
        else:
            holder = f"op {op.op_id}"
            todo = "it is no request of the contract: xceprov ops resume or a daemon completes it"
        return LeaseHeld(
            f"provider {op.provider}: {op.kind} op {op.op_id} is still open ({todo}); a request's op is "
            f"placed only while no op it would disturb is open, waited {self.session.fence_wait:g}s",
            holder,
        )
