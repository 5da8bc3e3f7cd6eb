"""Keep a PostgreSQL connection string and its password out of every message.

The connection string names the database server and, often, a password (``password=...`` in
the keyword form, ``user:secret@`` or ``?password=`` in a URI). libpq and psycopg may quote
parts of it in their error texts, and Terraform's ``pg`` backend may too; every error text
that reaches a message, a log or the audit goes through :func:`redact` first. Both the shared
store (this package) and the workspace's connection resolution (``workspace/pgconn.py``) use it.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

from orchestrator.model.redaction import HIDDEN, hide

CONN_STR_HIDDEN: Final = "[connection string]"

# ``password = value`` in a keyword/value string (the value bare, or quoted with '...').
_KEYWORD_PASSWORD: Final = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.IGNORECASE)
# ``scheme://user:secret@`` in a URI (user may be empty).
_URI_PASSWORD: Final = re.compile(r"([a-z][a-z0-9+.-]*://[^:/@\s]*):([^@\s]*)@", re.IGNORECASE)


def _passwords(conn_str: str) -> set[str]:
    """Every password value written in ``conn_str`` (raw and percent-decoded)."""
    found: set[str] = set()
    for match in _KEYWORD_PASSWORD.finditer(conn_str):
        value = match.group(2)
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = value[1:-1].replace("\\'", "'").replace("\\\\", "\\")
        found.add(value)
    found.update(match.group(2) for match in _URI_PASSWORD.finditer(conn_str))
    found |= {unquote(value) for value in found}
    return {value for value in found if value}


def secrets_of(conn_str: str) -> list[str]:
    """The strings a message must never show: the connection string itself and every password
    written in it, longest first (for callers that hide them in streams they cannot parse, such
    as Terraform's output)."""
    return sorted({s for s in {conn_str, *_passwords(conn_str)} if s}, key=len, reverse=True)


def redact(text: str, conn_str: str) -> str:
    """``text`` without ``conn_str``, without any password written in it, and without any
    ``password=...`` or ``user:...@`` part at all (also of another connection string)."""
    if conn_str:
        text = text.replace(conn_str, CONN_STR_HIDDEN)
    # In any form a message may carry them (escaped, quoted, percent-encoded, cut at a ":").
    text = hide(text, _passwords(conn_str))
    text = _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + HIDDEN, text)
    return _URI_PASSWORD.sub(lambda m: f"{m.group(1)}:{HIDDEN}@", text)
