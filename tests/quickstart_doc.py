"""The shell blocks of docs/quickstart.md, and which of them the quickstart test runs.

Every fenced ``sh`` block of the page is preceded by an HTML comment (invisible when rendered):
``<!-- quickstart: run -->`` for a block ``tests/integration/test_quickstart.py`` runs, or
``<!-- quickstart: not run: REASON -->`` for one it does not (an installation, a real cloud).
A block without either, or a mark with no block after it, is an error naming its line: the
page cannot grow a command that nobody decided about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "docs" / "quickstart.md"

_MARK = re.compile(r"^<!-- quickstart: (?:(run)|not run: (\S.*?)) -->$")
_ANY_MARK = re.compile(r"<!--\s*quickstart")


@dataclass(frozen=True)
class Block:
    """One ``sh`` block: its first line number (of the fence), whether the test runs it, and why not."""

    line: int
    run: bool
    reason: str
    text: str


def blocks(text: str, source: str = "docs/quickstart.md") -> list[Block]:
    """Every ``sh`` block of ``text`` in order; ValueError naming the line of an unmarked block,
    of a malformed mark, or of a mark that no ``sh`` block follows."""
    lines = text.splitlines()
    found: list[Block] = []
    pending: tuple[int, re.Match[str]] | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if _ANY_MARK.search(stripped):
            mark = _MARK.match(stripped)
            if mark is None:
                raise ValueError(f"{source}:{i + 1}: not a quickstart mark: {stripped}")
            if pending is not None:
                raise ValueError(f"{source}:{pending[0] + 1}: a quickstart mark with no sh block after it")
            pending = (i, mark)
        elif stripped.startswith("```"):
            fence = i
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise ValueError(f"{source}:{fence + 1}: a fenced block that never ends")
            if stripped == "```sh":
                if pending is None:
                    raise ValueError(
                        f"{source}:{fence + 1}: an sh block without <!-- quickstart: run --> "
                        "or <!-- quickstart: not run: REASON -->"
                    )
                mark = pending[1]
                body = "\n".join(lines[fence + 1 : end])
                run, reason = mark.group(1) is not None, mark.group(2) or ""
                found.append(Block(line=fence + 1, run=run, reason=reason, text=body))
                pending = None
            i = end
        elif stripped and pending is not None:
            raise ValueError(f"{source}:{pending[0] + 1}: a quickstart mark with no sh block right after it")
        i += 1
    if pending is not None:
        raise ValueError(f"{source}:{pending[0] + 1}: a quickstart mark with no sh block after it")
    return found


def script(text: str) -> str:
    """The blocks the test runs, in order, as one bash script that stops at the first failure."""
    return "set -euo pipefail\n" + "\n".join(b.text for b in blocks(text) if b.run) + "\n"
