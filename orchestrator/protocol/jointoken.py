"""Worker join tokens: the per-host credential a worker presents in ``joinWorker``.

``token = hex(HMAC-SHA256(join_key, "xce-join-token-v1" 0x00 instance_key 0x00 host_name))``
(UTF-8, lower-case hex, 64 characters). The controller owns the join key and gives it to the
provisioner (the only party that mints tokens); the bootstrap installs each host's token on
that host. A token is valid only for the instance key and host name it was minted for, so one
host's credential does not let it join as another (docs/protocol.md, "Authentication and
roles"). Standard library only: the controller side may be written in any language.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Final

DOMAIN: Final = b"xce-join-token-v1"
TOKEN_HEX_CHARS: Final = 64
MIN_KEY_BYTES: Final = 16


class JoinKeyError(ValueError):
    """The join key file is missing, unreadable or not a hex key of at least 16 bytes."""


def join_token(join_key: bytes, instance_key: str, host_name: str) -> str:
    """The token of the host ``host_name`` made by op instance ``instance_key``."""
    message = DOMAIN + b"\x00" + instance_key.encode() + b"\x00" + host_name.encode()
    return hmac.new(join_key, message, hashlib.sha256).hexdigest()


def token_valid(join_key: bytes, instance_key: str, host_name: str, token: str) -> bool:
    """Whether ``token`` is the token of ``(instance_key, host_name)`` (constant-time compare)."""
    if len(token) != TOKEN_HEX_CHARS:
        return False
    return hmac.compare_digest(join_token(join_key, instance_key, host_name), token.lower())


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
