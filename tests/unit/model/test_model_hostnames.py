"""Addresses and ports from the cloud: accepted only as IP addresses or RFC 1123 names."""

from __future__ import annotations

import pytest

from orchestrator.model.hostnames import ADDRESS_REFUSED, address_problem, checked_instance, port_problem


@pytest.mark.parametrize("value", ["10.0.0.1", "127.0.0.5", "fd00::1", "::ffff:10.0.0.1", "host-1.example.org", "h1"])
def test_ip_addresses_and_host_names_are_accepted(value: str) -> None:
    assert address_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "10.0.0.5,*",
        "10.0.0.5\n* ssh-ed25519 AAAAattacker",
        "*",
        "10.0.0.5 10.0.0.6",
        "-oProxyCommand=sh",
        "[10.0.0.5]:22",
        "fe80::1%eth0,*",
        "fe80::1%eth0",
        "",
        "a" * 64,
    ],
)
def test_anything_else_is_refused_naming_the_value(value: str) -> None:
    problem = address_problem(value)
    assert problem is not None and repr(value) in problem


def test_a_non_string_is_refused() -> None:
    assert address_problem(["10.0.0.1"]) is not None


@pytest.mark.parametrize("value", [None, "", 22, "2200", 65535])
def test_ports_in_range_or_absent_are_accepted(value: object) -> None:
    assert port_problem(value) is None


@pytest.mark.parametrize("value", [0, 65536, "22\n", "22,23", -1, True, 2.5])
def test_other_ports_are_refused(value: object) -> None:
    assert port_problem(value) is not None


def test_a_refused_record_keeps_its_identity_and_loses_its_address() -> None:
    raw = {"id": "i-1", "name": "h1", "address": "10.0.0.5,*", "port": 22, "tags": {"a": "b"}}
    checked = checked_instance(raw)
    assert (checked["id"], checked["name"], checked["tags"]) == ("i-1", "h1", {"a": "b"})
    assert (checked["address"], checked["port"]) == ("", None)
    assert "'10.0.0.5,*'" in checked[ADDRESS_REFUSED]
    assert raw["address"] == "10.0.0.5,*"  # the caller's record is not changed


def test_a_good_record_and_an_unaddressed_one_pass_unchanged() -> None:
    good = {"id": "i-1", "address": "10.0.0.1", "port": 2200}
    assert checked_instance(good) == good
    assert checked_instance({"id": "i-2", "address": None}) == {"id": "i-2", "address": None}


def test_a_bad_port_refuses_the_address_too() -> None:
    checked = checked_instance({"id": "i-1", "address": "10.0.0.1", "port": "22 -oProxyCommand=x"})
    assert checked["address"] == "" and "port" in checked[ADDRESS_REFUSED]
