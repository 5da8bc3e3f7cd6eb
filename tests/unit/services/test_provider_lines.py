"""The framing of ``xceprov provider serve``: lines out of chunks, whatever their boundaries, each bounded."""

from __future__ import annotations

import pytest

from orchestrator.services.provider_lines import OVERSIZED, Line, LineSplitter


def split(chunks: list[bytes], max_bytes: int = 10) -> list[Line]:
    splitter = LineSplitter(max_bytes)
    lines: list[Line] = []
    for chunk in chunks:
        lines += splitter.feed(chunk)
    return lines + splitter.end()


@pytest.mark.parametrize("cut", range(1, 12))
def test_a_line_cut_anywhere_between_chunks_is_one_line(cut: int) -> None:
    stream = b'{"a": 1}\r\nnext\n'
    assert split([stream[:cut], stream[cut:]]) == [b'{"a": 1}', b"next"]


def test_a_line_of_exactly_the_bound_passes_and_one_byte_more_does_not() -> None:
    assert split([b"0123456789\n", b"0123456789x\n", b"ok\n"]) == [b"0123456789", OVERSIZED, b"ok"]
    assert split([b"0123456789\r\n"]) == [b"0123456789"]  # the \r is the line's end, not its content


def test_an_endless_line_is_given_once_as_it_passes_the_bound_and_dropped_to_its_newline() -> None:
    splitter = LineSplitter(10)
    assert splitter.feed(b"x" * 11) == []  # 10 and a "\r" may still end as a line of 10
    assert splitter.feed(b"x") == [OVERSIZED]  # at once, not at the newline
    assert splitter.feed(b"x" * 10_000) == []
    assert splitter.feed(b"xx\nafter\n") == [b"after"]
    assert splitter.end() == []


def test_the_last_line_without_newline_is_given_at_the_end() -> None:
    assert split([b"one\ntw", b"o"]) == [b"one", b"two"]
    assert split([b"one\n"]) == [b"one"]
    assert split([b"x" * 11]) == [OVERSIZED]


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LineSplitter(0)
