"""``terraform.provider_mirror``: where an air-gapped site keeps its Terraform providers.

Either an absolute directory in Terraform's filesystem-mirror layout or the ``https://`` URL of
a network mirror (Terraform accepts no other scheme for one). Relative paths are refused rather
than guessed: the engine runs Terraform in working directories far from the configuration file.

A network mirror's URL may carry HTTP basic-auth credentials (``https://user:password@host/``):
the only way Terraform authenticates to a mirror that wants them (its ``credentials`` blocks and
``TF_TOKEN_*`` send bearer tokens; it reads no ``.netrc`` for a mirror's listings). They are a
secret: :func:`shown` is the URL as every message writes it, :func:`without_credentials` the URL
the public CLI configuration holds, :func:`credential_secrets` what no output may show.
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Final
from urllib.parse import unquote

from pydantic import AfterValidator

NETWORK_SCHEME = "https://"
# What Go's URL parser (Terraform's) takes in the user information of a URL: anything else,
# percent-encoded (RFC 3986: unreserved, sub-delims, ":" and "%HH").
_USERINFO_CHARS: Final = frozenset(string.ascii_letters + string.digits + "-._~!$&'()*+,;=:%")
_PERCENT: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
HIDDEN_CREDENTIALS: Final = "***"


def is_network(location: str) -> bool:
    """Whether ``location`` names a network mirror (a URL) rather than a directory."""
    return location.startswith(NETWORK_SCHEME)


def _split(location: str) -> tuple[str, str | None, str]:
    """A network URL as (``https://``, its user information or None, the rest from the host on).

    The authority ends at the first ``/``, ``?`` or ``#``; its user information at its last
    ``@`` (as Go's parser reads it)."""
    rest = location[len(NETWORK_SCHEME) :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, host = rest[:end].rpartition("@")
    if not at:
        return NETWORK_SCHEME, None, rest
    return NETWORK_SCHEME, userinfo, host + rest[end:]


def mirror_credentials(location: str | None) -> str | None:
    """The ``user:password`` a network mirror's URL carries, None without any (or for a directory)."""
    if location is None or not is_network(location):
        return None
    return _split(location)[1] or None


def without_credentials(location: str) -> str:
    """``location`` without the credentials of its URL (unchanged when it carries none)."""
    scheme, userinfo, rest = _split(location) if is_network(location) else ("", None, location)
    return scheme + rest if userinfo is not None else location


def shown(location: str) -> str:
    """``location`` as a message writes it: ``https://***@host/`` when its URL carries credentials
    (everything up to its last ``@``: also a password whose ``/`` or ``#`` was not encoded)."""
    if not is_network(location) or "@" not in location:
        return location
    return f"{NETWORK_SCHEME}{HIDDEN_CREDENTIALS}@{location.rpartition('@')[2]}"


def credential_secrets(location: str | None) -> list[str]:
    """What no output may show of ``location``: its URL whole, its credentials, the password
    (as written and percent-decoded). Empty without credentials."""
    userinfo = mirror_credentials(location)
    if location is None or userinfo is None:
        return []
    password = userinfo.partition(":")[2]
    return [s for s in dict.fromkeys((location, userinfo, password, unquote(password))) if s]


def _checked(value: str) -> str:
    if is_network(value):
        if len(value) == len(NETWORK_SCHEME) or any(c.isspace() for c in value):
            raise ValueError(f"{shown(value)!r} is not a usable https:// URL")
        userinfo = mirror_credentials(value)
        if userinfo is None and "@" in value:
            # A "/", "?" or "#" in a password ends the host part before its "@": the rest of the
            # password would be taken for a path and sent to the mirror.
            raise ValueError(
                "its '@' is not in the host part: a user name or password holding '/', '?', '#' or "
                "'@' must percent-encode it (%2F, %3F, %23, %40)"
            )
        if userinfo is not None and (set(userinfo) - _USERINFO_CHARS or _PERCENT.search(userinfo)):
            # Terraform refuses such a URL (and would quote it whole); never shown here either.
            raise ValueError(
                f"{shown(value)!r}: its user name or password holds a character a URL must "
                "percent-encode (Terraform refuses it): write it as %HH (%3C for '<', %25 for '%')"
            )
        return value
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is neither an absolute directory nor an https:// URL of a network mirror")
    if "\n" in value or "\x00" in value:
        raise ValueError("a mirror directory holds no line breaks or NUL characters")
    return value


ProviderMirror = Annotated[str, AfterValidator(_checked)]
