"""The contract's record of each request: what its worker did, beside the facts.

The facts say what the op did to the cloud; a record adds what only the contract knows: which
providers a request touches, whether its hosts are bootstrapped, each host's bootstrap outcome,
the machines a return left out (a busy host, and why), and its worker (pid, state, last
message). One small JSON document per request, named ``contract/requests/<request id>.json``,
kept through the documents seam: a 0600 file under the state directory, or with
``terraform.backend: pg`` the shared store's cluster-wide row, so a status asked on another
machine reads the same record. A record is replaced whole; the
request's worker is its only writer once it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.model.config import Config
from orchestrator.model.instances import OP_ID_PATTERN
from orchestrator.workspace.documents import Documents, json_body
from orchestrator.workspace.sharedstore import cluster_documents

FORMAT = 1
PREFIX = "contract/requests"

# What a worker is doing: started (spawned, not yet fenced), running (fenced, resuming the op),
# waiting (the fence is held by another holder), done, failed (``message`` says why).
WORKER_STATES = ("started", "running", "waiting", "done", "failed")


@dataclass(frozen=True)
class RequestRecord:
    """One request of the contract (a create or a return op; its op id is the request id)."""

    request_id: str
    kind: str  # "create" | "return"
    providers: tuple[str, ...]
    created: float
    bootstrap: bool = True
    hosts: dict[str, str] = field(default_factory=dict)  # host name -> bootstrap outcome ("ok", "failed: ...")
    launched: dict[str, float] = field(default_factory=dict)  # host name -> when its instance was recorded
    worker_pid: int = 0
    worker_state: str = "started"
    message: str = ""
    # A return's machines left out of its op, by instance key: why (a host running work).
    refused: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The document kept."""
        return {"format": FORMAT, **dataclasses.asdict(self), "providers": list(self.providers)}


def valid_request_id(request_id: str) -> bool:
    """Whether ``request_id`` has the form of an op id (nothing else names a request)."""
    return OP_ID_PATTERN.fullmatch(request_id) is not None


class RequestRecords:
    """The records of one cluster."""

    def __init__(self, config: Config, documents: Documents | None = None) -> None:
        self.documents = documents if documents is not None else cluster_documents(config)

    @staticmethod
    def name(request_id: str) -> str:
        """The document name of a request (only op ids are names: no path can be forged)."""
        if not valid_request_id(request_id):
            raise ValueError(f"not a request id: {request_id!r}")
        return f"{PREFIX}/{request_id}.json"

    def read(self, request_id: str) -> RequestRecord | None:
        """The record, or None when the request has none (not a request of the contract)."""
        if not valid_request_id(request_id):
            return None
        name = self.name(request_id)
        raw = self.documents.read(name)
        if raw is None:
            return None
        try:
            doc = durable.parse_json(raw)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
            doc.pop("format")
            doc["providers"] = tuple(doc["providers"])
            return RequestRecord(**doc)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FinalError(
                f"{self.documents.where(name)}: unreadable request record ({exc}); remove it to read the "
                "request from its facts alone"
            ) from None

    def write(self, record: RequestRecord) -> None:
        """Replace the record durably."""
        self.documents.write(self.name(record.request_id), json_body(record.to_json()))

    def update(self, request_id: str, **changes: Any) -> RequestRecord | None:
        """The record with ``changes``, written; None (nothing written) when there is none."""
        record = self.read(request_id)
        if record is None:
            return None
        record = dataclasses.replace(record, **changes)
        self.write(record)
        return record
