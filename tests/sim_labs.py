"""Lab networks for tests: each test gets its own /24 while others (and a product world) run.

The lab primitives (``ensure_lab``, ``destroy_lab``, the machine-wide lab lock) are the
simulated world's own (``orchestrator.sim.hosts.lab``); only the choice of a free test subnet
lives here, because only tests need it. Needs root, like every lab.
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Final

from orchestrator.sim.hosts import lab as labnet

# 10.213.128.0/24 .. 10.213.254.0/24; the product's default lab uses the low addresses.
TEST_POOL: Final = range(128, 255)


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    """The /24s that root-namespace addresses with a /24 or longer prefix sit in."""
    used: set[ipaddress.IPv4Network] = set()
    for link in labnet.ip_json("addr", "show"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet" and int(a.get("prefixlen", 0)) >= 24:
                used.add(ipaddress.IPv4Network(f"{a['local']}/24", strict=False))
    return used


def claim_test_lab(tag: str) -> labnet.LabConfig:
    """Create and return a lab on a /24 of 10.213.128.0/17 that no other lab on this machine uses.

    The choice and the creation happen under the machine-wide lab lock, so two tests never get
    the same subnet; ``tag`` (pid and test id) spreads the starting point. The caller removes
    the lab with ``labnet.destroy_lab``.
    """
    with labnet.labs_locked():
        used = _subnets_in_use()
        start = int(hashlib.sha1(tag.encode()).hexdigest(), 16) % len(TEST_POOL)
        for k in range(len(TEST_POOL)):
            third = TEST_POOL[(start + k) % len(TEST_POOL)]
            net = ipaddress.IPv4Network(f"10.213.{third}.0/24")
            name = "t" + hashlib.sha1(f"{tag}/{third}".encode()).hexdigest()[:7]
            lab = labnet.LabConfig(name=name, subnet=net)
            if net in used or labnet.lab_exists(lab):
                continue
            labnet.ensure_lab(lab)
            return lab
    raise labnet.LabError("no free test lab subnet in 10.213.128.0/17")
