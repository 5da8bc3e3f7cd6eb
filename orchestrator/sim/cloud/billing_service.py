"""What ``xceprov sim cloud bill`` does apart from argument parsing: the period checked into one
``UsageError`` line, the cloud's bill read (``billing.py``), and its table."""

from __future__ import annotations

from orchestrator.sim.cloud import billing
from orchestrator.sim.cloud.db import Database
from orchestrator.sim.cloud.records import rfc3339
from orchestrator.sim.cloud.service import aligned
from orchestrator.sim.cloud.store import CloudStore


def bill(store: CloudStore, since: float, until: float) -> billing.Bill:
    """The cloud's bill for ``[since, until)`` (the store made and migrated the table)."""
    store.expire_due()  # what is due ends at its own time before it is billed
    return billing.bill(Database(store.path), since, until)


def format_bill(found: billing.Bill) -> str:
    """The ``xceprov sim cloud bill`` table: one line per instance, then the total."""
    rows = [("INSTANCE", "NAME", "FLAVOR", "PROVIDER", "RUNNING_S", "STOPPED_S", "COST")]
    for line in found.lines:
        cost = f"{line.cost:.6f}" + (" (unpriced)" if line.unpriced else "")
        rows.append(
            (
                line.instance_id,
                line.name,
                line.flavor,
                line.provider,
                f"{line.running_seconds:.0f}",
                f"{line.stopped_seconds:.0f}",
                cost,
            )
        )
    when = f"{rfc3339(found.since)} to {rfc3339(found.until)}"
    total = f"total {found.total:.6f} over {len(found.lines)} instance(s), {when}"
    if found.unpriced_flavors:
        total += "; billed at 0, not in the catalogue or unpriced: " + ", ".join(found.unpriced_flavors)
    return aligned(rows) + "\n" + total
