"""One request line of ``xceprov provider serve``: ``{"id", "action", "input"}``, checked.

What a line must be (docs/provider-contract.md, "The persistent JSON-lines mode"): UTF-8 JSON
of one object with the keys ``id`` (a string of 1 to :data:`MAX_ID_CHARS` characters, or an
integer within ±2^53), ``action`` (one of the contract's actions) and ``input`` (the action's
document; ``{}`` when left out), and no other key. A line that is not so is answered with an
error; the error carries the line's id when the id itself could be read, ``null`` otherwise.
Whether ``input`` is right for its action is the contract's to say (its schemas).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from orchestrator.services.contract.intake import quoted, strict_json

MAX_ID_CHARS = 256
MAX_ID_INT = 2**53  # beyond it, JSON readers in other languages lose the integer's digits
KEYS = ("id", "action", "input")

RequestId = str | int | None


@dataclass(frozen=True)
class Request:
    """A request line that can be handed to the contract."""

    id: str | int
    action: str
    document: object


@dataclass(frozen=True)
class BadRequest:
    """A line that is no request: answered with ``message`` under ``id`` (None: ``null``)."""

    id: RequestId
    message: str


def parse_request(line: bytes, actions: Collection[str]) -> Request | BadRequest:
    """The request on ``line``, or why it is none."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadRequest(None, f"the line is not UTF-8 text (byte {exc.start})")
    try:
        value = strict_json(text)  # the one-shot form's reader: the same keys refused the same way
    except ValueError as exc:  # JSONDecodeError is a ValueError
        return BadRequest(None, f"the line is not one JSON document: {exc}")
    if not isinstance(value, dict):
        return BadRequest(None, f"a request is a JSON object {{id, action, input}}, not {_json_type(value)}")
    request_id, id_problem = _read_id(value)
    if id_problem:
        return BadRequest(None, id_problem)
    assert request_id is not None  # _read_id gives a problem or an id
    unknown = sorted(key for key in value if key not in KEYS)
    if unknown:
        return BadRequest(request_id, f"unknown key {quoted(unknown[0])} (a request has only id, action and input)")
    action = value.get("action")
    if not isinstance(action, str):
        return BadRequest(request_id, f"action: a string naming an action, not {_json_type(action)}")
    if action not in actions:
        known = ", ".join(actions)
        return BadRequest(request_id, f"action {quoted(action)}: no such action (known: {known})")
    return Request(request_id, action, value.get("input", {}))


def _read_id(value: dict[str, Any]) -> tuple[RequestId, str]:
    if "id" not in value:
        return None, "id: missing (every request carries the id its answer will carry)"
    request_id = value["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None, f"id: a string or an integer, not {_json_type(request_id)}"
    if isinstance(request_id, int) and abs(request_id) > MAX_ID_INT:
        return None, "id: an integer within ±2^53 (this one is larger)"
    if isinstance(request_id, str) and not 1 <= len(request_id) <= MAX_ID_CHARS:
        return None, f"id: a string of 1 to {MAX_ID_CHARS} characters, not {len(request_id)}"
    return request_id, ""


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
