"""``reportReasons``: tell the controller why each template's demand is or is not being met.

The scheduler shows it beside pending work (docs/protocol.md, "Reasons"). A report replaces the
sender's previous one; a controller that does not serve the request (``error(unsupported)``)
raises like any failed request: the daemon logs it and the pass goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from orchestrator.clients.controller import messages as m
from orchestrator.clients.controller.types import TemplateReason
from orchestrator.errors import ControllerError


class Requests(Protocol):
    """What sends one request and waits for its reply (the controller link)."""

    def request(self, kind: str, body: Any = None, timeout: float | None = None) -> tuple[str, Any]:
        """``(reply member, payload)``."""
        ...


def report_reasons(link: Requests, reasons: Sequence[TemplateReason], now: float) -> None:
    """Send ``reasons`` (one per template) decided at ``now`` (unix seconds); the controller answers ``ok``."""
    body = {"reasons": [m.template_reason_dict(r) for r in reasons], "timeUnixMs": int(now * 1000)}
    kind, _payload = link.request("reportReasons", body)
    if kind != "ok":
        raise ControllerError(f"unexpected reply to reportReasons: {kind}")
