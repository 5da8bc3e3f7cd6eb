"""Lines of a byte stream, each at most a bound long: the framing of ``xceprov provider serve``.

The persistent provider contract is JSON lines on stdin. A peer that never sends a newline, or
sends one line of a gigabyte, must not make the server hold it all: a line longer than the bound
is given as :data:`OVERSIZED` once (the server answers it with an error) and its bytes are
dropped until its newline, after which the next line is read as usual.
"""

from __future__ import annotations

from typing import Final


class _Oversized:
    """The marker of a line that passed the bound (its bytes were dropped)."""

    def __repr__(self) -> str:
        return "OVERSIZED"


OVERSIZED: Final = _Oversized()

Line = bytes | _Oversized


class LineSplitter:
    """Split chunks of a stream into lines without their end (``\\n``, or ``\\r\\n``)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self.max_bytes = max_bytes
        self._partial = bytearray()
        self._dropping = False  # within a line already given as OVERSIZED

    def feed(self, chunk: bytes) -> list[Line]:
        """The lines that ``chunk`` completes, in order (an oversized one as :data:`OVERSIZED`)."""
        lines: list[Line] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            start = end + 1
            if self._dropping:
                self._dropping = False
                continue
            # The partial line is bounded (below), the piece by the chunk: joining them is cheap.
            line = _without_cr(bytes(self._partial) + piece)
            self._partial.clear()
            lines.append(OVERSIZED if len(line) > self.max_bytes else line)
        rest = chunk[start:]
        if not self._dropping:
            self._partial += rest
            if len(self._partial) > self.max_bytes + 1:  # + 1: the "\r" of a "\r\n" still to come
                lines.append(OVERSIZED)
                self._partial.clear()
                self._dropping = True
        return lines

    def end(self) -> list[Line]:
        """At the end of the stream: its last line when it had no newline (nothing otherwise)."""
        partial, dropping = bytes(self._partial), self._dropping
        self._partial.clear()
        self._dropping = False
        if dropping or not partial:
            return []
        line = _without_cr(partial)
        return [OVERSIZED] if len(line) > self.max_bytes else [line]


def _without_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line
