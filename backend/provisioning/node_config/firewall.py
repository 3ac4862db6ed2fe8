"""A node's firewall from its cluster's security group rules, as an nftables ruleset applied over a
`NodeShell` (`nft -f -`, atomically: the old table goes in the same transaction the new one comes in).

What the rules never decide: loopback, replies to connections already accepted (established/related),
traffic with the other machines of the cluster (`peers`: its subnet, Slurm, NCCL, the jumphost to its
workers) and the backend's SSH from its provisioning address (`management`, port 22 in, its replies
out; nothing the node opens to that address is allowed by it). Everything else entering the node must
match an ingress rule, everything leaving it an egress rule: the host's own addresses included, so a
host service listening on every address is as far from a node as the security group says.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from backend.provisioning.node_config.shell import NodeShell

TABLE = "gpucloud"


def ruleset(rules: Mapping[str, Sequence[Mapping[str, Any]]], *, peers: str, outsider: str | None,
            management: str | None) -> str:
    """The nftables script for `rules` ({"ingress": [...], "egress": [...]}, rules as the API has them):
    `peers` is the cluster's network, `outsider` an address in it that is not the cluster's (the host's
    on a shared bridge), `management` the backend's address (in `peers` or not: never a peer)."""
    strangers = [address for address in (outsider, management) if address]
    excluded = f" != {{ {', '.join(strangers)} }}" if strangers else ""
    peer = f"ip saddr {peers}" + (f" ip saddr{excluded}" if excluded else "")
    peer_out = f"ip daddr {peers}" + (f" ip daddr{excluded}" if excluded else "")
    lines = [
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority filter; policy drop;",
        '    iif "lo" accept',
        "    ct state established,related accept",
        f"    {peer} accept",
    ]
    if management:
        lines.append(f"    ip saddr {management} tcp dport 22 accept")
    lines += [f"    {line}" for rule in rules.get("ingress", []) for line in _matches(rule, "saddr")]
    lines += [
        "  }",
        "  chain output {",
        "    type filter hook output priority filter; policy drop;",
        '    oif "lo" accept',
        "    ct state established,related accept",
        f"    {peer_out} accept",
    ]
    lines += [f"    {line}" for rule in rules.get("egress", []) for line in _matches(rule, "daddr")]
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def _matches(rule: Mapping[str, Any], direction: str) -> list[str]:
    """The nft rules accepting what one security rule allows, one per address family present."""
    v4 = [c for c in rule["cidr_blocks"] if ipaddress.ip_network(c).version == 4]
    v6 = [c for c in rule["cidr_blocks"] if ipaddress.ip_network(c).version == 6]
    blocks = [("ip", c, "icmp") for c in v4] + [("ip6", c, "ipv6-icmp") for c in v6]
    protocol = rule["protocol"]
    low, high = rule.get("from_port"), rule.get("to_port")
    ports = "" if low is None else f"{low}-{high if high is not None else low}"
    out = []
    # One nft rule per block: an anonymous set of overlapping blocks (0.0.0.0/0 and 10.0.0.0/8) is refused.
    for family, block, icmp in blocks:
        where = f"{family} {direction} {block}"
        if protocol in ("tcp", "udp"):
            out.append(f"{where} {protocol} dport {ports} accept")
        elif protocol == "icmp":
            out.append(f"{where} meta l4proto {icmp} accept")
        else:
            out.append(f"{where} accept")
    return out


def apply(shell: NodeShell, script: str) -> None:
    """Load the ruleset on the node (replacing the previous one in one transaction)."""
    shell.run(["nft", "-f", "-"], input=script)
