"""Host names and addresses that come from the cloud, checked before anything uses them.

A cloud record (Terraform state, the tagged listing) is data someone else wrote. Its address
reaches ``ssh``, ``ssh-keyscan`` and the toolkit's known_hosts, where a comma, a space, a ``*``
or a newline is syntax: ``10.0.0.5,*`` would pin one host's key for every host. So an address
is accepted only as an IP address (v4 or v6, no zone) or an RFC 1123 host name, and a port only
as an integer 1-65535; anything else is refused here, where the record enters the model, and
the host it belongs to gets a failed result naming the value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, 1-63 characters
# each, 253 in all. Nothing else reaches Ansible or ssh as a name: ``*``, ``,``, ``!``, ``&``,
# ``[``, ``~``, ``{``, a space or a leading ``-`` could widen a pattern, smuggle a template or
# read as an option.
MAX_LABEL = 63
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
MAX_HOST_NAME = 253
# The key an instance record carries, beside an emptied ``address``, when its address was refused.
ADDRESS_REFUSED = "address_refused"


def valid_host_name(name: str) -> bool:
    """True when ``name`` is an RFC 1123 host name."""
    return len(name) <= MAX_HOST_NAME and _HOST_NAME.fullmatch(name) is not None


def address_problem(value: object) -> str | None:
    """Why ``value`` is not a usable address (an IP address or an RFC 1123 name), or None."""
    if not isinstance(value, str):
        return f"cloud-reported address {value!r} is not a string"
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        if valid_host_name(value):
            return None
        return f"cloud-reported address {value!r} is neither an IP address nor a host name (RFC 1123); not used"
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        return f"cloud-reported address {value!r} has an IPv6 zone; not used"
    return None


def port_problem(value: object) -> str | None:
    """Why ``value`` is not a usable SSH port (absent, or an integer 1-65535), or None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        return f"cloud-reported port {value!r} is not a port number; not used"
    return None if 1 <= int(value) <= 65535 else f"cloud-reported port {value!r} is out of range; not used"


def checked_instance(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One instance record of the cloud with its address and port checked.

    A record whose address or port is refused keeps its id, name and tags (the instance exists
    and must still be returned one day) but loses both: ``address`` is "", ``port`` None and
    ``address_refused`` says why, so no consumer can reach or pin the value.
    """
    record = dict(raw)
    address = record.get("address")
    if address in (None, ""):
        return record
    problem = address_problem(address) or port_problem(record.get("port"))
    if problem is not None:
        record.update({"address": "", "port": None, ADDRESS_REFUSED: problem})
    return record
