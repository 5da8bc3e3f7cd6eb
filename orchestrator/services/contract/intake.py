"""From what a caller sent to a validated document: bytes, text or parsed JSON, each refused
with one line (``ContractRefused``, exit 1) when it is not a document of the action.

One JSON reader for both forms (:func:`strict_json`: the one-shot document and each line of
``provider serve``): a key twice in one object (``machineCount`` twice, of which a lenient
reader keeps the last) and ``NaN``/``Infinity`` are refused, never resolved silently.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import ValidationError

from orchestrator.errors import ContractRefused
from orchestrator.model.text import printable
from orchestrator.services.contract.schemas import INPUTS, Document

# A document larger than this is refused before it is parsed: the largest honest one (a return
# of MAX_IDS_PER_DOCUMENT machines) is a few hundred kilobytes.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024

D = TypeVar("D", bound=Document)


def strict_json(text: str) -> Any:
    """``text`` as JSON; ``ValueError`` for bad syntax, a key twice in one object, ``NaN`` or
    ``Infinity``, or nesting too deep for the reader."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deep") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (of two values, neither is the caller's choice)."""
    result: dict[str, Any] = {}
    for key, item in pairs:
        if key in result:
            raise ValueError(f"the key {quoted(key)} appears twice in one object")
        result[key] = item
    return result


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def quoted(text: str) -> str:
    """``text`` as a JSON string, cut short: a message never carries a whole hostile value."""
    shown = json.dumps(text[:64])
    return shown if len(text) <= 64 else shown[:-1] + '..."'


def parsed(raw: object) -> object:
    """``raw`` as JSON: bytes must be UTF-8 JSON, text JSON; anything else is taken as parsed."""
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        if len(data) > MAX_DOCUMENT_BYTES:
            raise ContractRefused(f"the document is {len(data)} bytes, more than {MAX_DOCUMENT_BYTES}")
        try:
            raw = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ContractRefused(f"the document is not UTF-8 text (byte {exc.start})") from None
    if isinstance(raw, str):
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise ContractRefused(f"the document is {len(raw)} characters, more than {MAX_DOCUMENT_BYTES}")
        if not raw.strip():
            return {}  # an empty file: the actions that take no input get none
        try:
            return strict_json(raw)
        except ValueError as exc:
            raise ContractRefused(f"the document is not JSON: {str(exc).splitlines()[0]}") from None
    return raw


def validated(action: str, raw: object) -> Document:
    """The document of ``action`` in ``raw``, validated by its model."""
    model = INPUTS.get(action)
    if model is None:
        known = ", ".join(INPUTS)
        raise ContractRefused(f"unknown action {printable(action)[:80]!r} (known: {known})")
    document = parsed(raw)
    if not isinstance(document, dict):
        raise ContractRefused(f"{action}: the document must be a JSON object, not {_json_type(document)}")
    return typed(model, document, action)


def typed(model: type[D], document: dict[str, object], action: str) -> D:
    """``document`` validated by ``model``; the first problem named by its path."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(document)"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise ContractRefused(f"{action}: {printable(where)[:200]}: {first['msg']}{more}") from None
    except RecursionError:
        raise ContractRefused(f"{action}: the document is nested too deeply") from None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | float) else type(value).__name__
