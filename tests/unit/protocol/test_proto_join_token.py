"""Join tokens (v2): the form minted, what it binds, and every hostile text refused with its reason
code before any MAC is computed over it (docs/protocol.md, "Authentication and roles")."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from orchestrator.protocol.jointoken import (
    MAX_TOKEN_CHARS,
    TOKEN_INVALID,
    TOKEN_MALFORMED,
    TOKEN_MISSING,
    TOKEN_VERSION,
    TokenProblem,
    check_token,
    join_token,
    parse_expiry,
)

KEY = bytes(range(32))
EXPIRES = 1_800_000_900


def test_a_token_is_v2_its_expiry_and_the_documented_hmac() -> None:
    token = join_token(KEY, "op-1-0", "h1", EXPIRES)
    version, expires, mac = token.split(".")
    assert (version, expires) == ("v2", str(EXPIRES))
    # The documented message, recomputed here as another language's controller would.
    message = b"xce-join-token-v2\x00op-1-0\x00h1\x00" + str(EXPIRES).encode()
    assert mac == hmac.new(KEY, message, hashlib.sha256).hexdigest()
    assert check_token(KEY, "op-1-0", "h1", token) == EXPIRES
    assert len(token) <= MAX_TOKEN_CHARS


def test_a_token_binds_its_instance_key_host_name_key_and_expiry() -> None:
    token = join_token(KEY, "op-1-0", "h1", EXPIRES)
    mac = token.rsplit(".", 1)[1]
    refused = {
        "another instance key": check_token(KEY, "op-1-1", "h1", token),
        "another host name": check_token(KEY, "op-1-0", "h2", token),
        "another join key": check_token(bytes(32), "op-1-0", "h1", token),
        "a later expiry written in": check_token(KEY, "op-1-0", "h1", f"v2.{EXPIRES + 3600}.{mac}"),
    }
    for what, result in refused.items():
        assert isinstance(result, TokenProblem) and result.code == TOKEN_INVALID, what
    # the separators keep ("a", "bc") and ("ab", "c") apart
    assert join_token(KEY, "a", "bc", EXPIRES) != join_token(KEY, "ab", "c", EXPIRES)


MAC = "ab" * 32


@pytest.mark.parametrize(
    ("token", "code"),
    [
        ("", TOKEN_MISSING),
        ("ab" * 32, TOKEN_VERSION),  # a v1 token (64 hex characters)
        ("AB" * 32, TOKEN_VERSION),
        (f"v2.{EXPIRES}", TOKEN_MALFORMED),  # two fields
        (f"v2.{EXPIRES}.{MAC}.x", TOKEN_MALFORMED),  # four fields
        (f"v3.{EXPIRES}.{MAC}", TOKEN_MALFORMED),
        (f"V2.{EXPIRES}.{MAC}", TOKEN_MALFORMED),
        (f"v2.soon.{MAC}", TOKEN_MALFORMED),  # non-numeric expiry
        (f"v2.-5.{MAC}", TOKEN_MALFORMED),
        (f"v2.+5.{MAC}", TOKEN_MALFORMED),
        (f"v2.1e9.{MAC}", TOKEN_MALFORMED),
        (f"v2.0{EXPIRES}.{MAC}", TOKEN_MALFORMED),  # leading zero: one text per expiry
        (f"v2.{'9' * 12}.{MAC}", TOKEN_MALFORMED),  # huge expiry
        (f"v2.{'9' * 5000}.{MAC}", TOKEN_MALFORMED),  # huge text
        (f"v2.{EXPIRES}.{'ab' * 31}", TOKEN_MALFORMED),  # short MAC
        (f"v2.{EXPIRES}.{'zz' * 32}", TOKEN_MALFORMED),  # non-hex MAC
        (f"v2.{EXPIRES}.{MAC.upper()}", TOKEN_MALFORMED),
        (f"v2.{EXPIRES}.{MAC}\n", TOKEN_MALFORMED),
        (f"v2.\u0661\u0662.{MAC}", TOKEN_MALFORMED),  # non-ASCII digits
        ("v2..", TOKEN_MALFORMED),
    ],
)
def test_hostile_token_texts_are_refused_with_their_reason(token: str, code: str) -> None:
    result = parse_expiry(token)
    assert isinstance(result, TokenProblem) and result.code == code, result
    checked = check_token(KEY, "op-1-0", "h1", token)
    assert isinstance(checked, TokenProblem) and checked.code == code


def test_an_expiry_out_of_range_is_not_minted() -> None:
    with pytest.raises(ValueError, match="out of range"):
        join_token(KEY, "op-1-0", "h1", 10**11)
    with pytest.raises(ValueError, match="out of range"):
        join_token(KEY, "op-1-0", "h1", -1)
    assert parse_expiry(join_token(KEY, "k", "h", 10**11 - 1)) == 10**11 - 1
