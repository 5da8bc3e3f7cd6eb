"""Published host key blocks (cloud-init's keys_to_console): parsed as untrusted text."""

from __future__ import annotations

import base64

import pytest

from orchestrator.model.published_keys import BEGIN, END, PublishedKeyError, published_keys


def _key(seed: int, keytype: str = "ssh-ed25519") -> str:
    blob = b"".join(len(f).to_bytes(4, "big") + f for f in (keytype.encode(), bytes([seed]) * 32))
    return f"{keytype} {base64.b64encode(blob).decode()}"


def test_the_first_complete_block_gives_type_and_base64_only() -> None:
    rsa = _key(2, "ssh-rsa")
    console = f"noise\r\n{BEGIN}\r\n{_key(1)} root@h1\r\n{rsa}\r\n{END}\r\n{BEGIN}\n{_key(9)}\n{END}\n"
    assert published_keys(console) == sorted([_key(1), rsa])


def test_no_block_or_an_unfinished_one_is_not_published_yet() -> None:
    assert published_keys("boot: starting\n") is None
    assert published_keys(f"{BEGIN}\n{_key(1)}\n") is None


@pytest.mark.parametrize(
    "line",
    [
        f"{_key(1)}\n{BEGIN}",  # a second opening marker inside the block
        f"* {_key(1)}",
        f"{_key(1)} a\tb",
        _key(1).replace("ssh-ed25519 ", "ssh-ed25519  "),
        "ssh-ed25519",
        "ssh-ed25519 " + "A" * 5000,
        f"ecdsa-sha2-nistp256 {_key(1).split()[1]}",
    ],
)
def test_anything_but_a_key_line_refuses_the_block_in_one_line(line: str) -> None:
    with pytest.raises(PublishedKeyError) as err:
        published_keys(f"{BEGIN}\n{line}\n{END}\n")
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_too_many_lines_are_refused() -> None:
    with pytest.raises(PublishedKeyError, match="at most 8"):
        published_keys("\n".join([BEGIN, *(_key(i) for i in range(9)), END]))
