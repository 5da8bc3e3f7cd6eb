"""The simulated controller's checks of a fact before it is fenced and committed, and its page size.

A fact is refused (``invalid``) when it lacks what its kind needs or carries text longer than
the controller keeps; nothing of a refused batch is committed (``ControllerCore.commit_facts``).
"""

from __future__ import annotations

from typing import Final

from orchestrator.model.facts import FactKind
from orchestrator.sim.controller.state import NO_EPOCH
from orchestrator.sim.controller.store import FactRecord

MAX_DETAIL_BYTES: Final = 4096
MAX_TEXT_BYTES: Final = 1024
DEFAULT_FACT_PAGE: Final = 1000


def invalid_fact(f: FactRecord) -> str:
    """Why the controller refuses ``f`` ("" when it does not)."""
    if not f.provider or not f.op_id:
        return "fact needs provider and opId"
    if (f.term, f.seq) == NO_EPOCH:
        return "fact needs an epoch"
    if len(f.detail.encode()) > MAX_DETAIL_BYTES:
        return f"fact detail longer than {MAX_DETAIL_BYTES} bytes"
    for value in (f.provider, f.op_id, f.instance_key, f.instance_id, f.template, f.host_name, f.address):
        if len(value.encode()) > MAX_TEXT_BYTES:
            return f"fact field longer than {MAX_TEXT_BYTES} bytes"
    if f.kind == FactKind.EXPECTED_HOST:
        if not (f.instance_id or f.host_name) or not f.template:
            return "expectedHost needs instanceId or hostName, and template"
        if f.join_deadline_ms <= 0:
            return "expectedHost needs joinDeadlineUnixMs"
    return ""


def page_size(limit: int) -> int:
    """The facts one ``queryFacts`` page returns (the asked limit, at most the default page)."""
    return min(limit or DEFAULT_FACT_PAGE, DEFAULT_FACT_PAGE)
