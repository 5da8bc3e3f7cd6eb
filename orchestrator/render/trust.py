"""The controller CA as it goes into user data: certificates only.

User data reaches every provisioned host (and the cloud's metadata service, where any process
on the host can read it). A ``controller.ca`` file that also holds a private key (a combined
PEM, a key appended by mistake) would hand that key to every instance, so the file is checked
before it is rendered: PEM ``CERTIFICATE`` blocks with valid base64 DER bodies, at least one,
and nothing else but whitespace between them.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

from orchestrator.errors import ConfigError

_BLOCK = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]+)-----\r?\n(?P<body>[A-Za-z0-9+/=\r\n]*?)-----END (?P=label)-----")
CERTIFICATE = "CERTIFICATE"


def check_certificates(text: str, where: str) -> int:
    """The number of certificates in ``text``; ConfigError (one line, naming ``where``) otherwise."""
    count = 0
    position = 0
    for match in _BLOCK.finditer(text):
        _only_whitespace(text[position : match.start()], where)
        position = match.end()
        label = match.group("label")
        if label != CERTIFICATE:
            raise ConfigError([f"{where}: holds a {label} block; only CERTIFICATE blocks may go to provisioned hosts"])
        try:
            der = base64.b64decode("".join(match.group("body").split()), validate=True)
        except (binascii.Error, ValueError):
            der = b""
        if not der.startswith(b"\x30"):  # a certificate is a DER SEQUENCE
            raise ConfigError([f"{where}: certificate {count + 1} is not valid PEM (bad base64 body)"])
        count += 1
    _only_whitespace(text[position:], where)
    if count == 0:
        raise ConfigError([f"{where}: holds no PEM CERTIFICATE block"])
    return count


def ca_file_present(path: Path) -> bool:
    """Whether something is at ``path``; a name the system refuses (too long, ...) counts as present,
    so that reading it reports why, naming the key."""
    try:
        return path.exists()
    except OSError:
        return True


def read_ca_file(path: Path) -> str:
    """The text of the CA file ``path`` after :func:`check_certificates`; errors name the file."""
    where = f"controller.ca {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{where}: file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{where}: cannot read: {exc}"]) from None
    check_certificates(text, where)
    return text


def _only_whitespace(gap: str, where: str) -> None:
    if gap.strip():
        # Never echo the content: it may be key material.
        what = "a malformed or unterminated PEM block" if "-----BEGIN" in gap else "text outside PEM blocks"
        raise ConfigError([f"{where}: holds {what}; only CERTIFICATE blocks may be in it"])
