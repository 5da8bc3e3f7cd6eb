"""The flight recorder's segments: ``<state_dir>/recordings/<start ms>.jsonl.gz`` (docs/recording.md).

A segment is a gzip stream of records (one JSON line each, :mod:`orchestrator.model.recording`)
named by the Unix time in milliseconds its first record may carry; segment *i* holds the
records from its start to the next segment's start. :class:`SegmentWriter` appends (each record
flushed to the operating system as it is written, never fsync'd), starts a new segment (beginning with the
standing config and demand, ``head``) every ``segment`` seconds or ``max_bytes`` compressed
bytes, and removes segments older than ``keep``.
:func:`read_period` reads the records of a period back in time order, from live and torn
segments alike (a segment cut by a crash is read up to its last whole line).
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from orchestrator.durable import PRIVATE_FILE, private_dir, remove
from orchestrator.errors import UsageError
from orchestrator.model.recording import CONFIG, DEMAND, Record, RecordingError, read_records

RECORDINGS: Final = "recordings"
SEGMENT_BYTES: Final = 16 * 1024 * 1024
_NAME = re.compile(r"^(\d{13,16})\.jsonl\.gz$")


def recordings_dir(state_dir: Path) -> Path:
    """Where the segments of ``state_dir`` live."""
    return Path(state_dir) / RECORDINGS


@dataclass(frozen=True)
class Segment:
    """One segment file and the time its records start at."""

    path: Path
    start: float


def segments(directory: Path) -> list[Segment]:
    """The segments in ``directory``, oldest first (none when it does not exist)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [Segment(directory / n, int(m.group(1)) / 1000.0) for n in names if (m := _NAME.match(n))]
    return sorted(found, key=lambda s: s.start)


def segment_lines(path: Path) -> Iterator[bytes]:
    """The whole lines of a segment; a segment still written, or cut by a crash, ends at its
    last whole line."""
    with gzip.open(path, "rb") as stream:
        try:
            for line in stream:
                if not line.endswith(b"\n"):
                    return  # torn: the crash cut it
                yield line
        except (EOFError, zlib.error, gzip.BadGzipFile):
            return


class SegmentWriter:
    """Appends records to the current segment, rotating and pruning (module docstring).

    Not thread safe: the caller holds its own lock. I/O errors propagate (the caller counts them).
    """

    def __init__(
        self,
        directory: Path,
        clock: Callable[[], float],
        segment: float = 3600.0,
        keep: float = 7 * 86400.0,
        max_bytes: int = SEGMENT_BYTES,
        head: Callable[[float], list[Record]] | None = None,
    ) -> None:
        self.directory = directory
        self.clock = clock
        self.segment = segment
        self.keep = keep
        self.max_bytes = max_bytes
        # The records each new segment begins with (the standing config and demand), so that
        # every segment says what was in force when it starts, whatever was pruned before it.
        self.head = head
        self._raw: IO[bytes] | None = None
        self._zip: gzip.GzipFile | None = None
        self._started = 0.0

    def write(self, record: Record) -> None:
        """Append ``record`` (a new segment first when the current one is due)."""
        now = self.clock()
        if self._zip is None or now - self._started >= self.segment or self._size() >= self.max_bytes:
            self._rotate(now)
        assert self._zip is not None
        self._zip.write(record.encode().encode() + b"\n")
        self._zip.flush()  # a sync flush: the record is in the file, readable, not fsync'd

    def close(self) -> None:
        """Finish the current segment (its gzip trailer)."""
        zipped, raw = self._zip, self._raw
        self._zip = self._raw = None
        try:
            if zipped is not None:
                zipped.close()
        finally:
            if raw is not None:
                raw.close()

    def drop(self) -> None:
        """Forget the current segment after a failure (finished when it can be): the next
        record starts a new one."""
        with contextlib.suppress(OSError, ValueError):
            self.close()
        self._zip = self._raw = None

    def _size(self) -> int:
        return self._raw.tell() if self._raw is not None else 0

    def _rotate(self, now: float) -> None:
        self.close()
        private_dir(self.directory)
        ms = int(now * 1000)
        existing = segments(self.directory)
        if existing:  # never before the last one (a clock set back): names stay in time order
            ms = max(ms, int(existing[-1].start * 1000) + 1)
        path = self.directory / f"{ms:013d}.jsonl.gz"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
        self._raw = os.fdopen(fd, "wb")
        self._zip = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0)
        self._started = now
        for record in self.head(now) if self.head is not None else []:
            carried = Record(now, record.kind, {**record.data, "carried": True})
            self._zip.write(carried.encode().encode() + b"\n")
        self.prune(now)

    def prune(self, now: float) -> list[Path]:
        """Remove the segments whose records all end before ``now - keep``; the removed."""
        found = segments(self.directory)
        removed: list[Path] = []
        for current, following in itertools.pairwise(found):
            if following.start <= now - self.keep:
                remove(current.path)
                removed.append(current.path)
        return removed


def read_period(directory: Path, since: float | None = None, until: float | None = None) -> list[Record]:
    """The records from ``since`` (default: the oldest segment's start) to ``until`` (inclusive),
    in time order (stable). The newest config and demand records before ``since`` come first,
    at ``since`` and marked ``"carried": true``: a period starts with the settings and the demand
    standing then. The heads of later segments (``carried`` already) are not repeated."""
    found = segments(directory)
    if not found:
        return []
    start = found[0].start if since is None else since
    chosen: list[Record] = []
    carried: dict[str, Record] = {}
    for index, segment in enumerate(found):
        last = index + 1 == len(found)
        if until is not None and segment.start > until:
            break
        if not last and found[index + 1].start <= start:
            # Wholly before the period: only the segment the period starts in is needed for the
            # standing config and demand (each segment begins with them, see SegmentWriter).
            continue
        for record in read_records(segment_lines(segment.path)):
            head = bool(record.data.get("carried"))
            if record.t < start or (head and record.t <= start):
                if record.kind in (CONFIG, DEMAND) and (
                    record.kind not in carried or carried[record.kind].t <= record.t
                ):
                    carried[record.kind] = record
                continue
            if head or (until is not None and record.t > until):
                continue
            chosen.append(record)
    chosen.sort(key=lambda r: r.t)
    heads = [Record(start, r.kind, {**r.data, "carried": True}) for r in sorted(carried.values(), key=lambda r: r.kind)]
    return heads + chosen


def file_lines(path: Path) -> Iterator[bytes]:
    """The lines of the file ``path``, gunzipped when it is a gzip stream (by its magic number,
    whatever its name)."""
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    if gzipped:
        with gzip.open(path, "rb") as stream:
            yield from stream
    else:
        with path.open("rb") as stream:
            yield from stream


def load_recording(path: Path) -> list[Record]:
    """The records of the recording file ``path`` (gzip or not), read as untrusted input; one
    line naming the file and the line on damage (``xceprov record show``, ``xceprov replay``)."""
    try:
        return list(read_records(file_lines(path)))
    except RecordingError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UsageError(f"{path}: not readable: {getattr(exc, 'strerror', None) or exc}") from None
