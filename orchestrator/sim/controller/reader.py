"""Frames assembled from bytes as they arrive, for the controller's non-blocking connections.

Memory grows with the bytes actually received, never with what a length prefix claims: a
header announcing 4 MiB followed by nothing costs a few bytes. The reader also records when
the current frame's first byte arrived, so the server can hold a whole frame (not each
``recv``) to a deadline: a peer feeding one byte at a time is cut off when the frame is late.
"""

from __future__ import annotations

from orchestrator.protocol.framing import HEADER, check_frame_length


class FrameReader:
    """Feed it received bytes; it returns each frame body once complete."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()  # header then body of the frame being read
        self._length: int | None = None  # body length, once the header is complete
        self.started: float | None = None  # monotonic time of the current frame's first byte

    @property
    def buffered(self) -> int:
        """Bytes held for the frame being read."""
        return len(self._buf)

    @property
    def in_frame(self) -> bool:
        """Whether part of a frame has arrived (a close now truncates it)."""
        return self._length is not None or bool(self._buf)

    def feed(self, data: bytes, now: float) -> list[bytes]:
        """Take ``data`` (received at ``now``); the frame bodies it completes, in order.

        Raises ``FrameTooLarge`` or ``FrameGarbage`` for a bad length prefix, before any of
        that frame's body is kept.
        """
        frames: list[bytes] = []
        view = memoryview(data)
        while view:
            if not self.in_frame:
                self.started = now
            if self._length is None:
                need = HEADER.size - len(self._buf)
                self._buf += view[:need]
                view = view[need:]
                if len(self._buf) < HEADER.size:
                    break
                (length,) = HEADER.unpack(self._buf)
                check_frame_length(length, self.max_bytes)
                self._length = length
                self._buf.clear()
                continue
            need = self._length - len(self._buf)
            self._buf += view[:need]
            view = view[need:]
            if len(self._buf) == self._length:
                frames.append(bytes(self._buf))
                self._buf = bytearray()
                self._length = None
                self.started = None
        return frames
