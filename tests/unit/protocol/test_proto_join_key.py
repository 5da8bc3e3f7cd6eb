"""The join key file: whatever it holds, one line naming it (the bootstrap mints tokens with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.protocol.jointoken import JoinKeyError, read_join_key


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"zz\xff\xfe", "not hex text"), (b"xyz", "not hex text"), (b"abcd", "shorter than"), (b"", "shorter than")],
    ids=["binary", "not-hex", "short", "empty"],
)
def test_a_bad_join_key_is_one_line_naming_the_file(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "join.key"
    path.write_bytes(content)
    with pytest.raises(JoinKeyError) as info:
        read_join_key(path)
    assert str(info.value).startswith(f"{path}: ") and says in str(info.value)


def test_a_hex_join_key_is_read(tmp_path: Path) -> None:
    path = tmp_path / "join.key"
    path.write_text("ab" * 32 + "\n")
    assert read_join_key(path) == bytes([0xAB]) * 32
