"""Partition keys, per-cluster subnets and IP addresses: pure arithmetic over numbered pools.

The store keeps one allocation row per key / subnet / address with a unique constraint; these helpers
only say which value comes next and what it means.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from backend.domain.catalog import CLUSTER_SUBNET_PREFIX

# P_Keys are 15 bits (the top bit is the membership flag); 0x7fff is the default partition every port is
# in, and 0x0000 is invalid, so tenants get 0x0001..0x7ffe.
PKEY_MIN = 0x0001
PKEY_MAX = 0x7FFE
DEFAULT_PKEY = 0x7FFF
SUBNET_PREFIX = CLUSTER_SUBNET_PREFIX  # 1022 hosts: a jumphost and up to ~1000 workers per cluster
GATEWAY_OFFSET = 1
JUMPHOST_OFFSET = 4
FIRST_WORKER_OFFSET = 10


def format_pkey(value: int) -> str:
    return f"0x{value:04x}"


def next_partition_key(used: Iterable[str]) -> str | None:
    """The lowest tenant P_Key not in `used`, or None when the fabric has run out."""
    taken = {int(v, 16) for v in used}
    for value in range(PKEY_MIN, PKEY_MAX + 1):
        if value not in taken:
            return format_pkey(value)
    return None


def next_subnet(block: str, used: Iterable[str], skip: Iterable[str] = ()) -> str | None:
    """The first /22 of `block` that is not in `used` and lies in none of the `skip` blocks."""
    taken = set(used)
    skipped = [ipaddress.ip_network(s) for s in skip]
    for subnet in ipaddress.ip_network(block).subnets(new_prefix=SUBNET_PREFIX):
        if str(subnet) not in taken and not any(subnet.overlaps(s) for s in skipped):
            return str(subnet)
    return None


def subnet_address(subnet: str, offset: int) -> str:
    network = ipaddress.ip_network(subnet)
    if not 0 < offset < network.num_addresses - 1:
        raise ValueError(f"offset {offset} outside {subnet}")
    return str(network.network_address + offset)


def worker_address(subnet: str, node_index: int) -> str:
    return subnet_address(subnet, FIRST_WORKER_OFFSET + node_index)


def jumphost_address(subnet: str) -> str:
    return subnet_address(subnet, JUMPHOST_OFFSET)


def next_public_address(public_cidr: str, used: Iterable[str]) -> str | None:
    taken = set(used)
    for address in ipaddress.ip_network(public_cidr).hosts():
        if str(address) not in taken:
            return str(address)
    return None
