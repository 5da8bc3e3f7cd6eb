"""The flight recorder's segments: rotation, retention, a period read back in time order."""

from __future__ import annotations

import gzip
import stat
from pathlib import Path

from orchestrator.model.recording import Record
from orchestrator.workspace.recordings import SegmentWriter, read_period, segment_lines, segments

T0 = 1_800_000_000.0


def host(t: float, name: str = "h") -> Record:
    return Record(t, "host", {"host": name, "event": "joined"})


def config(t: float, digest: str) -> Record:
    return Record(t, "config", {"digest": digest, "settings": {}})


def test_a_new_segment_each_period_and_old_ones_removed(tmp_path: Path) -> None:
    now = [T0]
    writer = SegmentWriter(tmp_path / "rec", lambda: now[0], segment=3600, keep=2 * 3600)
    for hour in range(5):
        now[0] = T0 + hour * 3600
        writer.write(host(now[0]))
        now[0] += 60
        writer.write(host(now[0]))
    writer.close()
    found = segments(tmp_path / "rec")
    # Hours 0 and 1 ended 2 h or more before hour 4 began: gone; hour 2 ended at hour 3 (kept).
    assert [s.start for s in found] == [T0 + h * 3600 for h in (2, 3, 4)]
    assert stat.S_IMODE((tmp_path / "rec").stat().st_mode) == 0o700
    assert all(stat.S_IMODE(s.path.stat().st_mode) == 0o600 for s in found)


def test_a_segment_rotates_by_size(tmp_path: Path) -> None:
    now = [T0]
    writer = SegmentWriter(tmp_path, lambda: now[0], max_bytes=200)
    for i in range(40):
        now[0] += 1
        writer.write(Record(now[0], "host", {"host": f"host-{i:04d}-{'x' * 40}", "event": "joined"}))
    writer.close()
    assert len(segments(tmp_path)) > 1
    assert len(read_period(tmp_path)) == 40


def test_each_segment_begins_with_the_standing_config_and_an_export_clips_and_orders(tmp_path: Path) -> None:
    now = [T0]
    standing: list[Record] = []
    writer = SegmentWriter(
        tmp_path, lambda: now[0], segment=100, head=lambda t: [config(t, d.data["digest"]) for d in standing]
    )
    first = config(T0, "a")
    writer.write(first)
    standing.append(first)
    for t in (10, 5, 150, 250):  # 5 after 10: written out of order by two threads
        now[0] = T0 + t
        writer.write(host(T0 + t, f"h{t}"))
    writer.close()
    every = read_period(tmp_path)
    assert [(r.kind, r.t - T0) for r in every] == [
        ("config", 0),
        ("host", 5),
        ("host", 10),
        ("host", 150),
        ("host", 250),
    ]
    # A period from 100 s: the config standing then comes first, carried, at the period's start.
    clipped = read_period(tmp_path, since=T0 + 100, until=T0 + 200)
    assert [(r.kind, r.t - T0) for r in clipped] == [("config", 100), ("host", 150)]
    assert clipped[0].data["carried"] is True and clipped[0].data["digest"] == "a"


def test_a_torn_segment_is_read_to_its_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / f"{int(T0 * 1000):013d}.jsonl.gz"
    data = gzip.compress((host(T0).encode() + "\n" + host(T0 + 1).encode() + "\n").encode())
    path.write_bytes(data[: len(data) - 30])  # cut: no trailer, a line half there
    lines = list(segment_lines(path))
    assert len(lines) <= 2
    assert all(line.endswith(b"\n") for line in lines)
