"""Hide a secret in a text whatever form it was written in: escaped, quoted, percent-encoded, cut.

A secret (a database password, a mirror's credentials) rarely reaches a message as written.
Terraform's ``-json`` output escapes ``<``, ``>`` and ``&`` as ``\\u003c``; Go's ``%q`` quoting
puts a backslash before ``"`` and ``\\`` (and JSON doubles it); a URL carries ``%40`` for ``@``;
libpq's keyword form writes ``\\'``. A literal replacement misses every one of these, and the
decoded text then shows the secret in clear. :func:`hide` matches each character of a secret
in any of those forms (any mix of them); :func:`hide_output` applies it to a program's output
after decoding its JSON messages, so the secret is matched as their reader will see it.

A URL parser that refuses a connection string quotes only the part before the character that
stopped it (Go's cuts the URL at ``#``, and names the "port" after the last ``:``): right after
a ``:`` (where a URI's password starts), every start of a secret of
:data:`FRAGMENT_MIN` characters or more is hidden too, once every secret was hidden whole.

Every sink that writes a message somewhere another person may read it (the audit, the daemon's
status document and log lines, the command line's error) passes it through :func:`hide_known`:
the process's secrets are registered once, where they are read (:func:`register`). Secrets
minted by the thousand (join tokens, one per host) are registered by their form instead
(:func:`register_form`): any text of that form is hidden, and the list of secrets does not grow
with every host.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

HIDDEN: Final = "***"
# The shortest start of a secret hidden on its own after a ":" (shorter ones say next to nothing
# and would hide too much ordinary text: a port number, a word).
FRAGMENT_MIN: Final = 3

_lock = threading.Lock()
_known: list[str] = []
_forms: list[re.Pattern[str]] = []


def _hex(byte: int, width: int) -> str:
    """``byte`` as ``width`` hex digits, either case (``%3c`` and ``%3C`` are the same byte)."""
    return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in f"{byte:0{width}x}")


def _char(char: str) -> str:
    """A pattern of ``char`` in every form a message may carry it in.

    Letters and digits are never escaped by JSON, Go quoting or URL encoding: only themselves.
    Any other character may be itself after any number of backslashes (one per quoting layer),
    its ``\\uXXXX`` escape or its percent-encoding (``+`` for a space)."""
    if char.isascii() and char.isalnum():
        return re.escape(char)
    forms = ["".join("%" + _hex(b, 2) for b in char.encode("utf-8"))]
    if ord(char) <= 0xFFFF:
        forms.append(r"\\*?\\u" + _hex(ord(char), 4))
    if char == " ":
        forms.append(r"\+")
    if char == "\\":
        # Pairs first (each quoting layer doubles a backslash), else one.
        return "(?:(?:" + r"\\\\" + ")+|" + r"\\" + "|" + "|".join(forms) + ")"
    # Any run of backslashes before it (the escapes of each quoting layer), taken whole.
    return r"(?:\\*?" + re.escape(char) + "|" + "|".join(forms) + ")"


@lru_cache(maxsize=64)
def _whole(secret: str) -> re.Pattern[str]:
    """The secret whole, in any form."""
    return re.compile("".join(_char(c) for c in secret))


@lru_cache(maxsize=64)
def _fragments(secret: str) -> re.Pattern[str] | None:
    """Right after a ``:``, any start of the secret (or of what follows a ``:`` inside it) of
    :data:`FRAGMENT_MIN` characters or more; None for a URL (its password, a secret of its own,
    is what may be cut) or a secret too short."""
    if "://" in secret:
        return None
    chars = [_char(c) for c in secret]
    fragments = []
    for start in [0] + [i + 1 for i, c in enumerate(secret) if c == ":"]:
        rest = chars[start:]
        if len(rest) < FRAGMENT_MIN:
            continue
        # The first FRAGMENT_MIN characters, then each further one optional in turn (greedy: the
        # longest start that is there).
        tail = ""
        for piece in reversed(rest[FRAGMENT_MIN:]):
            tail = f"(?:{piece}{tail})?"
        fragments.append("".join(rest[:FRAGMENT_MIN]) + tail)
    return re.compile(rf"(?<=:)(?:{'|'.join(fragments)})") if fragments else None


def hide(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets``, in any written form (see the module), as ``***``."""
    # Longest first: a password inside a whole connection string goes with the string. Every
    # whole secret before any cut one: a cut of one must not break another's whole match.
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)
    for secret in ordered:
        text = _whole(secret).sub(HIDDEN, text)
    for secret in ordered:
        fragments = _fragments(secret)
        if fragments is not None:
            text = fragments.sub(HIDDEN, text)
    return text


def hide_output(text: str, secrets: Iterable[str]) -> str:
    """A program's output (Terraform's) with ``secrets`` hidden after decoding what is JSON in it.

    Each line that is a JSON object (``-json`` messages), or the whole text when it is one JSON
    document (``validate -json``), is decoded, every string in it hidden (:func:`hide`) and, when
    one changed, encoded again: the secret is matched as the message's reader will see it, and
    the output stays JSON whatever the secret's characters. Any other line is hidden as text.
    """
    found = tuple(s for s in secrets if s)
    if not found:
        return text
    document = _json(text)
    if document is not None:
        hidden = _hide_in(document, found)
        return text if hidden == document else json.dumps(hidden) + "\n"
    out = []
    for line in text.splitlines(keepends=True):
        message = _json(line) if line.lstrip().startswith("{") else None
        if message is None:
            out.append(hide(line, found))
            continue
        hidden = _hide_in(message, found)
        out.append(line if hidden == message else json.dumps(hidden) + ("\n" if line.endswith("\n") else ""))
    return "".join(out)


def _json(text: str) -> Any:
    """``text`` decoded when it is a JSON object or array, else None."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def register(secrets: Iterable[str]) -> None:
    """Remember ``secrets`` for :func:`hide_known` (the sinks' guard) for the life of the process."""
    with _lock:
        for secret in secrets:
            if secret and secret not in _known:
                _known.append(secret)


def register_form(form: re.Pattern[str]) -> None:
    """Hide any text matching ``form`` at every sink for the life of the process (a secret minted
    per host, such as a join token, whose characters need no escaping in any written form)."""
    with _lock:
        if form not in _forms:
            _forms.append(form)


def _registered() -> tuple[str, ...]:
    with _lock:
        return tuple(_known)


def _registered_forms() -> tuple[re.Pattern[str], ...]:
    with _lock:
        return tuple(_forms)


def _hide_forms(text: str, forms: tuple[re.Pattern[str], ...]) -> str:
    for form in forms:
        text = form.sub(HIDDEN, text)
    return text


def hide_known(text: str) -> str:
    """``text`` with every secret this process registered hidden (a no-op when there is none)."""
    known = _registered()
    return _hide_forms(hide(text, known) if known else text, _registered_forms())


def hide_known_in(value: Any) -> Any:
    """``value`` (a JSON-like document: mappings, lists, strings) with :func:`hide_known` applied
    to every string in it, keys included; the document is copied only when a secret is known."""
    known, forms = _registered(), _registered_forms()
    return _hide_in(value, known, forms) if known or forms else value


def _hide_in(value: Any, known: tuple[str, ...], forms: tuple[re.Pattern[str], ...] = ()) -> Any:
    if isinstance(value, str):
        return _hide_forms(hide(value, known), forms)
    if isinstance(value, Mapping):
        return {_hide_in(k, known, forms): _hide_in(v, known, forms) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_hide_in(v, known, forms) for v in value]
    return value


class HidingFormatter(logging.Formatter):
    """A log handler's guard: what ``inner`` writes (message, fields, traceback), with every
    registered secret hidden; a JSON line is decoded first (:func:`hide_output`), so it stays one."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        """``inner``'s text of ``record`` without any registered secret."""
        # A form's characters need no escaping: matched in the JSON line as written.
        return _hide_forms(hide_output(self.inner.format(record), _registered()), _registered_forms())
