"""Text from the cloud or the controller, made safe to print on a terminal or in a log line.

A cloud instance name, a tag, a controller host name or a reason string is someone else's
data. Printed raw, an ESC moves the cursor or recolours the screen and a newline forges a
second line of a table. Every human-readable printer passes such values through
:func:`printable`; JSON output needs nothing (``json.dumps`` escapes control characters).
"""

from __future__ import annotations


def printable(value: object) -> str:
    """``value`` as text on one line: every character Python does not call printable (control
    characters, line and paragraph separators, bidi overrides, other format characters) is
    written as its escape (``\\n``, ``\\x1b``, ``\\u202e``)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
