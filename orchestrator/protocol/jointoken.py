"""Worker join tokens: the per-host credential a worker presents in ``joinWorker``.

``token = "v2." <expires> "." hex(HMAC-SHA256(join_key, "xce-join-token-v2" 0x00 instance_key
0x00 host_name 0x00 <expires>))``: ``<expires>`` is the unix time (whole seconds, decimal ASCII
without sign or leading zeros) after which the token admits no first join (the host's join
deadline); the MAC is 64 lower-case hex characters. The controller owns the join key and gives
it to the provisioner (the only party that mints tokens); the bootstrap installs each host's
token on that host. A token is valid only for the instance key and host name it was minted for
(and its expiry cannot be changed without the key), so one host's credential does not let it
join as another. What the controller does with a valid token (single use, expiry, the v1 form)
is in docs/protocol.md, "Authentication and roles". Standard library only: the controller side
may be written in any language.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DOMAIN: Final = b"xce-join-token-v2"
PREFIX: Final = "v2"
TOKEN_HEX_CHARS: Final = 64
MIN_KEY_BYTES: Final = 16
# 11 digits reach the year 5138: any longer expiry is hostile or a bug, never a join deadline.
MAX_EXPIRES_DIGITS: Final = 11
# The largest token any valid form can be: the controller refuses longer text before parsing.
MAX_TOKEN_CHARS: Final = len(PREFIX) + 1 + MAX_EXPIRES_DIGITS + 1 + TOKEN_HEX_CHARS
_EXPIRES = re.compile(r"(?:0|[1-9][0-9]{0,10})\Z")
_MAC = re.compile(r"[0-9a-f]{64}\Z")

# Reason codes of a refused worker join (the first word of the error(refused) message,
# docs/protocol.md "Authentication and roles"). Checked statelessly here: missing, malformed,
# version, invalid; by the controller's records: expired, used, other host.
TOKEN_MISSING: Final = "tokenMissing"
TOKEN_MALFORMED: Final = "tokenMalformed"
TOKEN_VERSION: Final = "tokenVersion"
TOKEN_INVALID: Final = "tokenInvalid"
TOKEN_EXPIRED: Final = "tokenExpired"
TOKEN_USED: Final = "tokenUsed"
TOKEN_OTHER_HOST: Final = "tokenOtherHost"


class JoinKeyError(ValueError):
    """The join key file is missing, unreadable or not a hex key of at least 16 bytes."""


@dataclass(frozen=True)
class TokenProblem:
    """Why a token text is not a valid token of a host: a reason code and one line."""

    code: str
    message: str


def _mac(join_key: bytes, instance_key: str, host_name: str, expires: int) -> str:
    message = b"\x00".join((DOMAIN, instance_key.encode(), host_name.encode(), str(expires).encode()))
    return hmac.new(join_key, message, hashlib.sha256).hexdigest()


def join_token(join_key: bytes, instance_key: str, host_name: str, expires: int) -> str:
    """The token of the host ``host_name`` made by op instance ``instance_key``, valid for a
    first join until the unix time ``expires`` (whole seconds)."""
    if not 0 <= expires < 10**MAX_EXPIRES_DIGITS:
        raise ValueError(f"join token expiry {expires} is out of range")
    return f"{PREFIX}.{expires}.{_mac(join_key, instance_key, host_name, expires)}"


def parse_expiry(token: str) -> int | TokenProblem:
    """The expiry a token text carries, or why it is not a v2 token (no key needed)."""
    if not token:
        return TokenProblem(TOKEN_MISSING, "joinWorker without a join token")
    if len(token) == TOKEN_HEX_CHARS and _MAC.match(token.lower()):
        return TokenProblem(
            TOKEN_VERSION, "a v1 join token: this controller accepts v2 tokens only (re-run the bootstrap)"
        )
    if len(token) > MAX_TOKEN_CHARS:
        return TokenProblem(TOKEN_MALFORMED, f"the join token is longer than {MAX_TOKEN_CHARS} characters")
    fields = token.split(".")
    if len(fields) != 3 or fields[0] != PREFIX:
        return TokenProblem(TOKEN_MALFORMED, "the join token is not of the form v2.<expires>.<mac>")
    if not _EXPIRES.match(fields[1]):
        return TokenProblem(TOKEN_MALFORMED, "the join token's expiry is not a unix time in whole seconds")
    if not _MAC.match(fields[2]):
        return TokenProblem(TOKEN_MALFORMED, "the join token's MAC is not 64 lower-case hex characters")
    return int(fields[1])


def check_token(join_key: bytes, instance_key: str, host_name: str, token: str) -> int | TokenProblem:
    """The expiry of ``token`` when it was minted with ``join_key`` for ``(instance_key,
    host_name)`` (constant-time compare), else why not. Expiry and use are the caller's."""
    expires = parse_expiry(token)
    if isinstance(expires, TokenProblem):
        return expires
    if not hmac.compare_digest(_mac(join_key, instance_key, host_name, expires), token.rsplit(".", 1)[1]):
        return TokenProblem(
            TOKEN_INVALID, "the join token is not valid for this host and instance key (or of another join key)"
        )
    return expires


def read_join_key(path: Path) -> bytes:
    """The join key in ``path`` (hex text); :class:`JoinKeyError` names the file and the problem."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise JoinKeyError(f"{path}: cannot read the join key: {exc.strerror or exc}") from None
    except UnicodeDecodeError:  # hex text is ASCII: anything else is not a join key
        raise JoinKeyError(f"{path}: the join key is not hex text") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise JoinKeyError(f"{path}: the join key is not hex text") from None
    if len(key) < MIN_KEY_BYTES:
        raise JoinKeyError(f"{path}: the join key is shorter than {MIN_KEY_BYTES} bytes")
    return key
