"""Security group rules: what a rule may say, the project's default group, the rules a cluster enforces.

A rule is {"protocol", "from_port", "to_port", "cidr_blocks", "description"}. The JSON Schema of the API
says the simple part (protocol enum, ports 1-65535, list sizes); the `security_rules` rule of
`domain.input_rules` says the rest (checked here and by the provider at plan time):
- tcp / udp need `from_port`; `to_port` defaults to it and may not be below it;
- icmp / all take no port (they match every packet of the protocol);
- every CIDR is an IPv4 or IPv6 network without host bits (`10.0.0.0/8`, not `10.0.0.1/8`).
Traffic inside a cluster is never subject to rules (see the drivers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from backend.domain.errors import FieldError

PROTOCOLS = ("tcp", "udp", "icmp", "all")
PORTLESS_PROTOCOLS = ("icmp", "all")
MAX_RULES = 50
MAX_CIDRS = 20
DIRECTIONS = ("ingress", "egress")
CODE = "invalid_security_rule"  # the contract's rule (`domain.input_rules`); the message says what is wrong
DEFAULT_GROUP_NAME = "default"
DEFAULT_INGRESS: tuple[dict[str, Any], ...] = (
    {"protocol": "tcp", "from_port": 22, "to_port": 22, "cidr_blocks": ["0.0.0.0/0", "::/0"],
     "description": "SSH from anywhere"},
)
DEFAULT_EGRESS: tuple[dict[str, Any], ...] = (
    {"protocol": "all", "from_port": None, "to_port": None, "cidr_blocks": ["0.0.0.0/0", "::/0"],
     "description": "All outbound traffic"},
)


def cidr_problem(text: str) -> str | None:
    """Why `text` is no network in CIDR notation, or None."""
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as error:
        if "host bits set" in str(error):
            fixed = ipaddress.ip_network(text, strict=False)
            return f"{text!r} has host bits set; write the network, {fixed}"
        return f"{text!r} is not a CIDR block such as 10.0.0.0/8 or 2001:db8::/32"
    return None


def rule_problems(rule: Mapping[str, Any], path: str) -> list[FieldError]:
    """What is wrong with one rule at `path` (e.g. `ingress[0]`), beyond what the JSON Schema checks. Each
    message starts with `path`: a group's rules are a list, and the reader must know which one is wrong."""
    problems: list[tuple[str, str]] = []  # (field under the rule, message)
    protocol, low, high = rule.get("protocol"), rule.get("from_port"), rule.get("to_port")
    if protocol in PORTLESS_PROTOCOLS:
        problems += [(name, f"{name} is not allowed with protocol {protocol} (it matches every packet of the "
                            "protocol): remove it")
                     for name, value in (("from_port", low), ("to_port", high)) if value is not None]
    elif low is None:
        problems.append(("from_port", f"protocol {protocol} needs from_port (1-65535; to_port for a range)"))
    elif high is not None and high < low:
        backwards = f"to_port {high} is below from_port {low}; a range runs from low to high"
        problems.append(("to_port", backwards))
    for index, cidr in enumerate(rule.get("cidr_blocks") or []):
        problem = cidr_problem(cidr)
        if problem is not None:
            problems.append((f"cidr_blocks[{index}]", problem))
    return [FieldError(f"{path}.{where}", CODE, f"{path}: {message}") for where, message in problems]


def rules_problems(body: Mapping[str, Any]) -> list[FieldError]:
    """Every problem of the `ingress` and `egress` lists of a group body (absent lists are fine)."""
    errors: list[FieldError] = []
    for direction in DIRECTIONS:
        for index, rule in enumerate(body.get(direction) or []):
            errors += rule_problems(rule, f"{direction}[{index}]")
    return errors


def port_range(rule: Mapping[str, Any]) -> tuple[int, int] | None:
    """The ports a rule matches (inclusive), or None for every port (icmp / all)."""
    low = rule.get("from_port")
    if low is None:
        return None
    high = rule.get("to_port")
    return int(low), int(high if high is not None else low)


def effective_rules(groups: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The union of the groups' rules, per direction, in group then rule order (what a node enforces)."""
    out: dict[str, list[dict[str, Any]]] = {direction: [] for direction in DIRECTIONS}
    for group in groups:
        for direction in DIRECTIONS:
            for rule in group.get(direction) or []:
                out[direction].append({
                    "protocol": rule["protocol"],
                    "from_port": rule.get("from_port"),
                    "to_port": rule.get("to_port"),
                    "cidr_blocks": list(rule.get("cidr_blocks") or []),
                })
    return out
