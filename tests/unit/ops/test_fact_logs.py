"""Fact logs commit batches: the standalone journal in one append and one fsync, the link in
requests within the protocol's limit (the sim controller's side: tests/unit/sim/controller/
test_simctl_batches.py)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import FinalError
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.facts import LinkFacts, LocalFacts, chunks
from orchestrator.ops.fence import STANDALONE_EPOCH
from orchestrator.protocol.schema import MAX_BATCH_FACTS


def burst(op: str, n: int, provider: str = "sim") -> list[Fact]:
    """The instance facts of ``n`` instances of ``op``, two per key."""
    out: list[Fact] = []
    for i in range(n):
        key = f"{op}-{i:03d}"
        out.append(Fact(FactKind.INSTANCE_CREATED, provider, op, STANDALONE_EPOCH, instance_key=key))
        out.append(Fact(FactKind.EXPECTED_HOST, provider, op, STANDALONE_EPOCH, instance_key=key, template="cpu"))
    return out


def journal_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count calls of ``os.<name>`` (the journal's writes and reads); returns the call log."""
    calls: list[int] = []
    real = getattr(os, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(os, name, counted)
    return calls


def test_a_batch_is_one_write_and_one_fsync_and_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "facts" / "unit.jsonl"
    log = LocalFacts(path)
    facts = burst("op-a", 50)
    fsyncs = count_calls(monkeypatch, "fsync")
    writes = count_calls(monkeypatch, "write")
    log.commit_many(facts + facts[:4])  # a fact twice in one batch is stored once
    assert len(writes) == 1 and len(fsyncs) == 2  # the batch, and the new journal's directory
    log.commit_many(facts)  # a resumed op commits them again: nothing is written
    assert len(writes) == 1
    lines = journal_lines(path)
    assert [line["fact_id"] for line in lines] == list(range(1, 101))
    assert [(f.kind, f.instance_key) for f in LocalFacts(path).facts("sim")] == [
        (f.kind, f.instance_key) for f in facts
    ]


def test_after_the_first_read_a_commit_reads_only_what_others_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "unit.jsonl"
    LocalFacts(path).commit_many(burst("op-old", 200))
    log = LocalFacts(path)
    log.commit_many(burst("op-a", 1))  # reads the journal once
    read: list[int] = []
    real = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        read.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", counted)
    for fact in burst("op-b", 100):
        log.commit(fact)  # was: the whole journal read again per fact
    assert read == []
    # Another standalone command (another provider) appends: the tail, and only it, is read.
    LocalFacts(path).commit_many(burst("op-c", 1, provider="other"))  # its own first read: all of it
    del read[:]
    log.commit_many(burst("op-d", 1))
    assert len(read) == 1 and read[0] < 1000  # the other command's two lines
    ids = [line["fact_id"] for line in journal_lines(path)]
    assert ids == list(range(1, len(ids) + 1))  # the other command's fact was counted
    assert [f.op_id for f in log.facts("other")] == ["op-c", "op-c"]


def test_a_torn_last_line_is_cut_before_the_next_batch(tmp_path: Path) -> None:
    path = tmp_path / "unit.jsonl"
    LocalFacts(path).commit_many(burst("op-a", 2))
    with path.open("a") as f:
        f.write('{"kind": "instanceCreated", "op_id": "op-b"')  # a crash in the middle of a write
    log = LocalFacts(path)
    assert len(log.facts("sim")) == 4
    log.commit_many(burst("op-c", 1))
    lines = journal_lines(path)  # every line parses: the fragment is gone
    assert [line["op_id"] for line in lines] == ["op-a"] * 4 + ["op-c"] * 2
    assert len(LocalFacts(path).facts("sim")) == 6


def test_damage_before_the_last_line_is_reported_not_skipped(tmp_path: Path) -> None:
    path = tmp_path / "unit.jsonl"
    LocalFacts(path).commit_many(burst("op-a", 2))
    lines = path.read_text().splitlines()
    lines[1] = "not a fact"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match=r"unit.jsonl:2: unreadable fact"):
        LocalFacts(path).facts("sim")


def disk_full_once(monkeypatch: pytest.MonkeyPatch, name: str, after_half: bool = False) -> list[int]:
    """``os.<name>`` raises ENOSPC once (a full disk); with ``after_half``, ``os.write`` first
    writes half of what it is given, as a disk that fills in the middle of a write does."""
    real = getattr(os, name)
    calls: list[int] = []

    def failing(fd: int, *args: Any) -> Any:
        calls.append(1)
        if after_half and len(calls) == 1:
            data = bytes(args[0])
            return real(fd, data[: len(data) // 2])
        if len(calls) == (2 if after_half else 1):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)

    monkeypatch.setattr(os, name, failing)
    return calls


@pytest.mark.parametrize(("call", "after_half"), [("fsync", False), ("write", False), ("write", True)])
def test_a_fact_is_known_only_once_written_and_a_retry_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, after_half: bool
) -> None:
    path = tmp_path / "unit.jsonl"
    log = LocalFacts(path)
    log.commit_many(burst("op-a", 1))
    calls = disk_full_once(monkeypatch, call, after_half)
    with pytest.raises(FinalError, match=r"unit.jsonl: 2 fact\(s\) not recorded: No space left on device"):
        log.commit_many(burst("op-b", 1))
    assert calls
    # Not known here, not on disk for anyone else (no torn or unsynced tail stays behind).
    assert [f.op_id for f in log.facts("sim")] == ["op-a", "op-a"]
    assert [line["op_id"] for line in journal_lines(path)] == ["op-a", "op-a"]
    log.commit_many(burst("op-b", 1))  # the retry writes them
    assert [line["op_id"] for line in journal_lines(path)] == ["op-a", "op-a", "op-b", "op-b"]
    assert [line["fact_id"] for line in journal_lines(path)] == [1, 2, 3, 4]
    assert [f.op_id for f in LocalFacts(path).facts("sim")] == ["op-a", "op-a", "op-b", "op-b"]


def test_no_journal_reads_as_no_facts_and_creates_nothing(tmp_path: Path) -> None:
    assert LocalFacts(tmp_path / "facts" / "unit.jsonl").facts("sim") == []
    assert not (tmp_path / "facts").exists()


class RecordingLink:
    """The link's ``commit_facts`` and settings, recording the batches it is sent."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.settings = SimpleNamespace(max_frame_bytes=max_frame_bytes)
        self.batches: list[list[Fact]] = []

    def commit_facts(self, facts: Sequence[Fact]) -> list[int]:
        self.batches.append(list(facts))
        return [0] * len(facts)


def test_link_facts_send_one_request_per_chunk_within_the_limits() -> None:
    link = RecordingLink(4 * 1024 * 1024)
    facts = burst("op-a", 1100)  # 2200 facts
    LinkFacts(link).commit_many(facts)  # type: ignore[arg-type]
    assert [len(b) for b in link.batches] == [MAX_BATCH_FACTS, MAX_BATCH_FACTS, 200]
    assert [f for b in link.batches for f in b] == facts  # in order, none lost or repeated
    # Facts with long details are chunked by size, so a request stays far below the frame limit.
    link = RecordingLink(64 * 1024)
    heavy = [
        Fact(FactKind.LOST, "sim", "op-a", STANDALONE_EPOCH, instance_key=f"k{i}", detail="x" * 4000) for i in range(20)
    ]
    LinkFacts(link).commit_many(heavy)  # type: ignore[arg-type]
    assert len(link.batches) > 1 and all(sum(len(f.detail) for f in b) <= 16 * 1024 for b in link.batches)
    assert [f for b in link.batches for f in b] == heavy


def test_chunks_of_nothing_are_no_requests() -> None:
    assert list(chunks([], MAX_BATCH_FACTS, 1024)) == []
    link = RecordingLink(4 * 1024 * 1024)
    LinkFacts(link).commit_many([])  # type: ignore[arg-type]
    assert link.batches == []
