"""Text from the cloud or the controller, made safe to print on a terminal or in a log line.

A cloud instance name, a tag, a controller host name or a reason string is someone else's
data. Printed raw, an ESC moves the cursor or recolours the screen and a newline forges a
second line of a table. Every human-readable printer passes such values through
:func:`printable`, and so does the daemon's text log; JSON output needs nothing
(``json.dumps`` escapes control characters).
"""

from __future__ import annotations

import unicodedata

# Characters a line-oriented reader may take as the end of a line, besides the C0/C1 controls.
_LINE_BREAKS = {"\u2028", "\u2029", "\x85"}


def printable(value: object) -> str:
    """``value`` as text on one line: control characters, line and paragraph separators and
    format characters (bidi overrides) written as their escapes (``\\n``, ``\\x1b``, ``\\u202e``)."""
    text = str(value)
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char in _LINE_BREAKS or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)
