"""The cloud's addresses: its network, allocation (given-back addresses first) and their text.

Every address the cloud can hand out lies in 10.213.0.0/16 (stored as an offset from its start).
The cloud's network (meta key ``network``, set by ``xceprov sim up`` to its lab's subnet; the
whole /16 when unset) is where it allocates: its first address is the network, the second the
lab gateway and the last the broadcast address, none of which an instance gets.
"""

from __future__ import annotations

import ipaddress
import sqlite3
from typing import Final

from orchestrator.sim.cloud.db import Database, meta, set_meta
from orchestrator.sim.cloud.errors import AddressSpaceExhausted, InvalidParameterValue

NETWORK: Final = ipaddress.IPv4Network("10.213.0.0/16")
FIRST_OFFSET: Final = 2


def allocate_address(conn: sqlite3.Connection) -> int:
    """A free address inside the cloud's network (inside the caller's write transaction)."""
    net = network_of(meta(conn, "network"))
    first, last = offsets(net)
    # An address given back inside the network first; one a live instance holds again (the
    # network moved away and back) is no longer free.
    for (addr,) in conn.execute(
        "SELECT addr FROM free_addresses WHERE addr BETWEEN ? AND ? ORDER BY addr", (first, last)
    ).fetchall():
        conn.execute("DELETE FROM free_addresses WHERE addr = ?", (addr,))
        if not address_live(conn, int(addr)):
            return int(addr)
    nxt = max(int(meta(conn, "next_addr") or first), first)
    while nxt <= last and address_live(conn, nxt):
        nxt += 1
    if nxt > last:
        raise AddressSpaceExhausted(f"AddressLimitExceeded: every address of {net} is in use")
    set_meta(conn, "next_addr", str(nxt + 1))
    conn.execute("DELETE FROM free_addresses WHERE addr = ?", (nxt,))
    return nxt


def address_live(conn: sqlite3.Connection, addr: int) -> bool:
    """Whether a live instance holds ``addr``."""
    return (
        conn.execute("SELECT 1 FROM instances WHERE addr = ? AND state != 'terminated'", (addr,)).fetchone() is not None
    )


def set_network(db: Database, network: ipaddress.IPv4Network) -> None:
    """Allocate inside ``network`` from now on (refused before anything is written when it does
    not lie inside 10.213.0.0/16 or is smaller than a /29)."""
    if not network.subnet_of(NETWORK) or network.prefixlen > 29:
        raise InvalidParameterValue(
            f"InvalidParameterValue: network {network} must lie inside {NETWORK} (a /16 to a /29)"
        )
    with db.write() as conn:
        if network_of(meta(conn, "network")) != network:
            set_meta(conn, "network", str(network))
            set_meta(conn, "next_addr", str(offsets(network)[0]))


def network_of(text: str | None) -> ipaddress.IPv4Network:
    """The network of meta key ``network`` (the whole /16 when unset)."""
    return ipaddress.IPv4Network(text) if text else NETWORK


def offsets(net: ipaddress.IPv4Network) -> tuple[int, int]:
    """The first and last offset (from 10.213.0.0) an instance may get inside ``net``."""
    base = int(net.network_address) - int(NETWORK.network_address)
    return base + FIRST_OFFSET, base + net.num_addresses - 2


def addr_text(offset: int) -> str:
    """The dotted address of an offset."""
    return str(NETWORK.network_address + offset)
