"""A first-boot host's outcome, read from the result line its boot hook printed on the console.

A host started with ``bootstrap: {mode: first-boot}`` configures and joins by itself; nobody
reaches it over SSH. When its boot hook gets as far as starting the node manager, or fails on
the way, it prints one line on the console (docs/bootstrap.md, "Results without SSH")::

    XCE-FIRST-BOOT {"v":1,"outcome":"failed","step":"join","message":"the controller refused the token"}

The cloud relays the console (EC2 ``GetConsoleOutput``, Nova ``os-getConsoleOutput``, the
simulated cloud's console): the text is the host's, so it is untrusted input. The parser here
never raises on it and bounds what it keeps:

* only the last :data:`CONSOLE_LIMIT` characters of the console are looked at (the line is
  printed at the end of the boot; EC2 returns the latest 64 KiB too);
* a line holding the marker is at most :data:`LINE_LIMIT` bytes from the marker on; a longer
  one, one whose JSON does not parse (or nests too deeply), is no object, has another ``v``, an
  unknown ``outcome`` or ``step``, or a ``message`` that is no string, is *malformed*;
* the last well-formed line wins (a boot that failed, was fixed and started again prints a
  second line); with none, a malformed one makes the result ``unreadable`` (why, in one line);
  with no marker at all there is no result yet;
* fields other than ``v``, ``outcome``, ``step`` and ``message`` are ignored (a newer hook may
  say more); control, format and line-separator characters are dropped from the message and
  it is cut to :data:`MESSAGE_LIMIT` characters.

Success is not read here: a host has joined when the controller matches the expected host.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

MARKER: Final = "XCE-FIRST-BOOT "
VERSION: Final = 1
CONSOLE_LIMIT: Final = 64 * 1024  # characters of the console's end that are looked at
LINE_LIMIT: Final = 4 * 1024  # bytes of one result line, from the marker on
MESSAGE_LIMIT: Final = 300  # characters of the host's message that are kept
STEPS: Final = ("config", "start", "join")


class FirstBootKind(StrEnum):
    """Where a first-boot host is, in the order a boot goes through them."""

    NO_RESULT = "no-result"  # nothing on the console yet (or it could not be read this time)
    UNREADABLE = "unreadable"  # a result line was there, but none was well-formed
    STARTED = "started"  # the node manager started; the controller has not seen the host join yet
    FAILED = "failed"  # the boot hook failed at a step: counted like a failed push bootstrap
    JOINED = "joined"  # the controller matched the expected host


@dataclass(frozen=True)
class FirstBootOutcome:
    """One host's first-boot outcome: its kind, the failed step, and the host's (cleaned) message."""

    kind: FirstBootKind
    step: str = ""
    message: str = ""

    def line(self) -> str:
        """One human-readable line (``failed at step join: ...``, ``started, not joined``...)."""
        if self.kind == FirstBootKind.FAILED:
            return f"failed at step {self.step}" + (f": {self.message}" if self.message else "")
        if self.kind == FirstBootKind.STARTED:
            return "started, not joined" + (f": {self.message}" if self.message else "")
        if self.kind == FirstBootKind.UNREADABLE:
            return f"unreadable result: {self.message}"
        if self.kind == FirstBootKind.NO_RESULT:
            return "no result yet" + (f" ({self.message})" if self.message else "")
        return "joined"

    def bootstrap_outcome(self) -> str:
        """The host's outcome once the wait for it ended, as a bootstrap play reports a host
        (``ok``, ``failed: ...``): what the bootstrap records, the op's audit entry and the
        provider contract's machine ``result`` read. Joined: ``ok``; failed: the step and the
        message; anything else: not joined by its ``join_deadline``, with what the console said."""
        if self.kind == FirstBootKind.JOINED:
            return "ok"
        if self.kind == FirstBootKind.FAILED:
            return f"failed: first boot {self.line()}"
        return f"failed: first boot not joined by its join_deadline ({self.line()})"

    def to_json(self) -> dict[str, str]:
        """JSON-ready: ``outcome``, ``step`` and ``message``."""
        return {"outcome": self.kind.value, "step": self.step, "message": self.message}


NO_RESULT: Final = FirstBootOutcome(FirstBootKind.NO_RESULT)
JOINED: Final = FirstBootOutcome(FirstBootKind.JOINED)


def clean_message(value: str) -> str:
    """``value`` without control, format or separator characters, cut to :data:`MESSAGE_LIMIT`."""
    kept = (c for c in value if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"))
    text = "".join(kept).strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def parse_console(console: str) -> FirstBootOutcome:
    """The outcome the console shows (see the module docstring); never raises."""
    tail = console[-CONSOLE_LIMIT:]
    problem = ""
    for raw in reversed(tail.split("\n")):
        at = raw.find(MARKER)
        if at < 0:
            continue
        outcome = _parse_line(raw[at + len(MARKER) :].rstrip("\r"))
        if isinstance(outcome, FirstBootOutcome):
            return outcome
        problem = problem or outcome  # the last malformed line says why, if no line is well-formed
    if problem:
        return FirstBootOutcome(FirstBootKind.UNREADABLE, message=clean_message(problem))
    return NO_RESULT


def _parse_line(payload: str) -> FirstBootOutcome | str:
    """The outcome of one result line's JSON, or why it is malformed."""
    size = len(payload.encode("utf-8", errors="replace")) + len(MARKER)
    if size > LINE_LIMIT:
        return f"result line of {size} bytes, longer than {LINE_LIMIT}"
    try:
        doc: Any = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
        return f"result line is not JSON ({type(exc).__name__})"
    if not isinstance(doc, dict):
        return "result line is not a JSON object"
    version = doc.get("v")
    if isinstance(version, bool) or version != VERSION:
        return f"result line has version {_shown(version)}, not {VERSION}"
    outcome, step, message = doc.get("outcome"), doc.get("step", ""), doc.get("message", "")
    if not isinstance(message, str):
        return "result line's message is not a string"
    if outcome == "failed":
        if step not in STEPS:
            return f"result line's step {_shown(step)} is not one of {', '.join(STEPS)}"
        return FirstBootOutcome(FirstBootKind.FAILED, str(step), clean_message(message))
    if outcome == "started":
        return FirstBootOutcome(FirstBootKind.STARTED, "", clean_message(message))
    return f"result line's outcome {_shown(outcome)} is neither started nor failed"


def _shown(value: object) -> str:
    """A value of the host's, short and printable, for a one-line reason."""
    if value is None or isinstance(value, (str, int, float)):
        return clean_message(json.dumps(value)[:40])
    return type(value).__name__
