"""SSH host keys an instance published on its console at first boot, checked before any use.

cloud-init's ``keys_to_console`` module prints the host's public keys between two marker lines;
clouds expose the console (EC2 ``GetConsoleOutput``, OpenStack ``os-getConsoleOutput``) and
tools read the keys from there instead of trusting whatever answers on the network first::

    -----BEGIN SSH HOST KEY KEYS-----
    ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... root@host
    -----END SSH HOST KEY KEYS-----

The console is written by the host and relayed by the cloud: untrusted text. Only the first
complete block counts (printed at boot, before sshd or any job could write to the console); each
of its lines must be exactly ``<type> <base64> [comment]`` with a known key type whose base64
decodes to an SSH public key blob of that same type. Anything else in the block (a second
address pattern, a comma, a marker, a control character) refuses the whole block: a known_hosts
line is built from the type and the base64 only, so nothing of the host's text becomes syntax.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

BEGIN: Final = "-----BEGIN SSH HOST KEY KEYS-----"
END: Final = "-----END SSH HOST KEY KEYS-----"

KEY_TYPES: Final = frozenset(
    {"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"}
)
# A 16384-bit RSA key is about 2.8 KB of base64; nothing real is longer, and a host has a few keys.
MAX_BASE64: Final = 4096
MAX_KEYS: Final = 8
MAX_COMMENT: Final = 256

_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_COMMENT: Final = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")


class PublishedKeyError(ValueError):
    """A published key block that must not be used; the message is one line."""


def published_keys(console: str) -> list[str] | None:
    """The keys (``"<type> <base64>"``, sorted) of the first complete block of ``console``.

    ``None`` while no complete block is there (the host has not published yet). Raises
    ``PublishedKeyError`` with a one-line reason when the block is malformed or hostile.
    """
    lines = console.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip("\r") == BEGIN)
    except StopIteration:
        return None
    body: list[str] = []
    for line in lines[start + 1 :]:
        text = line.removesuffix("\r")
        if text == END:
            break
        body.append(text)
    else:
        return None  # the block is still being written
    if not body:
        raise PublishedKeyError("the published host key block is empty")
    if len(body) > MAX_KEYS:
        raise PublishedKeyError(f"the published host key block has {len(body)} lines (at most {MAX_KEYS})")
    return sorted({key_line(text) for text in body})


def key_line(text: str) -> str:
    """``"<type> <base64>"`` of one published line ``<type> <base64> [comment]``, or ``PublishedKeyError``."""
    shown = ascii(text[:80])
    parts = text.split(" ", 2)
    if len(parts) < 2:
        raise PublishedKeyError(f"published host key line {shown} is not '<type> <base64> [comment]'")
    keytype, blob_text = parts[0], parts[1]
    if keytype not in KEY_TYPES:
        raise PublishedKeyError(f"published host key line {shown}: {keytype[:40]!a} is not an SSH host key type")
    if len(parts) == 3 and (len(parts[2]) > MAX_COMMENT or not _COMMENT.fullmatch(parts[2])):
        raise PublishedKeyError(f"published host key line {shown}: the comment is not printable text")
    if len(blob_text) > MAX_BASE64 or not _BASE64.fullmatch(blob_text):
        raise PublishedKeyError(f"published host key line {shown}: the key is not base64")
    try:
        blob = base64.b64decode(blob_text, validate=True)
    except (binascii.Error, ValueError):
        raise PublishedKeyError(f"published host key line {shown}: the key is not base64") from None
    if _blob_type(blob) != keytype:
        raise PublishedKeyError(f"published host key line {shown}: the key is not an {keytype} public key")
    return f"{keytype} {blob_text}"


def _blob_type(blob: bytes) -> str | None:
    """The key type an SSH public key blob names in its first field (RFC 4253 §6.6)."""
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    if size > 64 or len(blob) < 4 + size:
        return None
    try:
        return blob[4 : 4 + size].decode("ascii")
    except UnicodeDecodeError:
        return None
