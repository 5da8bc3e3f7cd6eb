"""What the executor's ops report: the instances a create made, the outcome of a create and of a return."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.clients.terraform.messages import PlanResult


@dataclass(frozen=True)
class Created:
    """One instance an op created, as recorded at the controller."""

    key: str
    instance_id: str
    name: str
    address: str
    template: str
    join_deadline: float
    # Launched into its template's warm pool (stopped, not expected to join): no bootstrap.
    pool: bool = False


# The outcomes of a bootstrap play (``clients.ansible.runner``) that leave a host bootstrapped; the
# others (failed, unreachable, skipped, stopped) leave it to be bootstrapped again. A first-boot
# host is "started" at its creation (ops/firstboot.py): no play runs, its join decides.
BOOTSTRAPPED = ("ok", "changed", "started")


@dataclass
class CreateResult:
    """What a create op did."""

    op_id: str
    provider: str
    template: str
    created: list[Created] = field(default_factory=list)
    bootstrap: dict[str, str] = field(default_factory=dict)  # host name -> "status[: why]"

    @property
    def bootstrap_failed(self) -> list[str]:
        """The hosts whose bootstrap ran and did not succeed (``xceprov bootstrap``'s failed hosts)."""
        return sorted(name for name, outcome in self.bootstrap.items() if outcome.split(":")[0] not in BOOTSTRAPPED)


@dataclass
class ReturnResult:
    """What a return op did (or, with ``dry_run``, would do)."""

    op_id: str
    provider: str
    keys: list[str]
    deleted: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    plan: PlanResult | None = None  # the first shard's plan (the only one when one shard holds the keys)
    drained: list[str] = field(default_factory=list)
    plans: list[PlanResult] = field(default_factory=list)  # one per shard holding chosen keys
