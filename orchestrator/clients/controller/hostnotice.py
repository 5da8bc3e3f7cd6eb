"""``hostNotice`` over the controller link: the cloud gave a host an interruption notice.

Apart from ``link.py`` (one concern: the request and its answer, docs/protocol.md §7
"Interruption notices"); the daemon's notice watch calls :meth:`HostNotices.notice_host`.
"""

from __future__ import annotations

from orchestrator.clients.controller import messages as m
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.errors import FinalError, LeaseLost
from orchestrator.model.facts import Epoch

UNKNOWN_HOST = "unknownHost"


class HostNotices:
    """Interruption notices told to the controller over ``link``."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    def notice_host(
        self,
        provider: str,
        epoch: Epoch,
        *,
        instance_id: str,
        host_name: str = "",
        kind: str,
        reclaim_at: float,
        detail: str = "",
    ) -> tuple[str, float]:
        """Tell the controller the cloud gave the host an interruption notice (fenced by the
        provider's lease epoch): it closes the host, records ``reclaim_at`` and pushes an
        ``interruptionNotice`` host event. Returns the host's state after it and the controller's
        time of the ack (unix seconds, 0 when it gave none); ``("unknownHost", 0.0)`` when the
        controller has no record of the host."""
        body = {
            "provider": provider,
            "epoch": m.epoch_dict(epoch),
            "instanceId": instance_id,
            "hostName": host_name,
            "kind": kind,
            "reclaimAtUnixMs": int(reclaim_at * 1000),
            "detail": detail[:4096],
        }
        try:
            reply, payload = self.link.request("hostNotice", body)
        except FinalError as exc:  # an error reply: the code follows "refused hostNotice: "
            if str(exc).startswith(f"controller refused hostNotice: {UNKNOWN_HOST}:"):
                return UNKNOWN_HOST, 0.0
            raise
        if reply == "ack":
            state = str((payload or {}).get("hostState", "") or "unknown")
            at = float((payload or {}).get("committedUnixMs", 0) or 0) / 1000.0
            return (state if state.isidentifier() and len(state) <= 32 else "unknown"), at
        if reply == "reject" and str((payload or {}).get("reason")) == "staleEpoch":
            raise LeaseLost(f"controller rejected hostNotice for provider {provider}: stale epoch {epoch}")
        raise FinalError(f"controller refused hostNotice: {reply}: {(payload or {}).get('message', '')}")
