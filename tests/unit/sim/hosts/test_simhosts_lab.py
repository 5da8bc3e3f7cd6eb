"""Lab names and addresses (no namespaces are made here)."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.sim.hosts.lab import LAB_SPACE, LabConfig, LabError, host_mac


def test_product_default() -> None:
    lab = LabConfig()
    assert lab.subnet == LAB_SPACE == ipaddress.IPv4Network("10.213.0.0/16")
    assert str(lab.gateway) == "10.213.0.1"
    assert lab.netns == "xcelab-xce" and lab.gateway_if == "xg-xce"


def test_names_fit_interface_name_limits() -> None:
    lab = LabConfig.parse("abcdefgh", "10.213.200.0/24")
    assert len(lab.gateway_if) <= 15
    assert len(lab.host_veth("i-" + "f" * 40)) <= 15
    assert lab.host_veth("i-1") != lab.host_veth("i-2")
    assert lab.host_netns("i-1/../x").startswith(lab.host_netns_prefix)
    assert "/" not in lab.host_netns("i-1/../x")


@pytest.mark.parametrize(
    ("name", "subnet"),
    [("UPPER", "10.213.0.0/16"), ("toolongname", "10.213.0.0/16"), ("ok", "10.214.0.0/24"),
     ("ok", "10.213.0.0/30"), ("ok", "10.213.1.0/16"), ("ok", "nonsense")],
)  # fmt: skip
def test_refuses_bad_labs(name: str, subnet: str) -> None:
    with pytest.raises(LabError):
        LabConfig.parse(name, subnet)


def test_holds_only_host_addresses() -> None:
    lab = LabConfig.parse("t1", "10.213.140.0/24")
    assert lab.holds("10.213.140.2")
    assert not lab.holds("10.213.140.1")  # gateway
    assert not lab.holds("10.213.140.0") and not lab.holds("10.213.140.255")
    assert not lab.holds("10.213.0.2") and not lab.holds("garbage")


def test_json_round_trip_and_stable_macs() -> None:
    lab = LabConfig.parse("t1", "10.213.140.0/24")
    assert LabConfig.from_json(lab.to_json()) == lab
    assert host_mac(lab, "10.213.140.7") == host_mac(lab, "10.213.140.7")
    assert host_mac(lab, "10.213.140.7").startswith("02:")
    assert host_mac(lab, "10.213.140.7") != host_mac(lab, "10.213.140.8")
