"""Text from the cloud or the controller prints on one line, control characters escaped."""

from __future__ import annotations

import pytest

from orchestrator.model.text import printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("evil\x1b[2J\nforged", "evil\\x1b[2J\\nforged"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("bell\x07 del\x7f c1\x9b", "bell\\x07 del\\x7f c1\\x9b"),
        ("line\u2028sep", "line\\u2028sep"),
        ("\u202egnp.exe", "\\u202egnp.exe"),
    ],
)
def test_control_and_format_characters_are_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(raw).isprintable()


def test_ordinary_text_is_unchanged() -> None:
    for text in ("node-cpu-01  10.0.0.1  changed", "café ünïcode 名前", ""):
        assert printable(text) == text


def test_non_strings_are_printed_as_text() -> None:
    assert printable(3) == "3"
