"""The SSRF rule on addresses (no I/O: IP literals only)."""

from __future__ import annotations

import ipaddress

import pytest

from signoff.webhooks.urlpolicy import AddressPolicy, is_public_address, parse_networks

INTERNAL = [
    "127.0.0.1",
    "127.255.0.9",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.10",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2001:db8::1",
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", INTERNAL)
def test_internal_addresses_are_not_public(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_public(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


def test_development_permits_everything() -> None:
    policy = AddressPolicy(enforce=False, https_only=False)
    assert all(policy.permits(ipaddress.ip_address(a)) for a in INTERNAL + PUBLIC)


def test_the_allowlist_admits_only_its_networks() -> None:
    policy = AddressPolicy(True, True, parse_networks(["10.1.0.0/16", "fd00::/8"]))
    assert policy.permits(ipaddress.ip_address("10.1.2.3"))
    assert policy.permits(ipaddress.ip_address("::ffff:10.1.2.3"))  # mapped form too
    assert policy.permits(ipaddress.ip_address("fd12::1"))
    assert not policy.permits(ipaddress.ip_address("10.2.0.1"))
    assert not policy.permits(ipaddress.ip_address("127.0.0.1"))
    assert policy.permits(ipaddress.ip_address("8.8.8.8"))
