"""The API's input rules that a JSON Schema keyword cannot say, declared once as data.

The API enforces them (`broken_rules`, the SSH key parser) and publishes them in the OpenAPI document as
`x-gpucloud-rules` on each request schema; the provider derives its plan-time checks from that document,
so the two cannot drift. Everything a JSON Schema keyword says (pattern, lengths, ranges, enums, decimal
places) comes from the pydantic request models instead.

A rule names the request `schema`, the dotted `field` it blames, the error `code`, a short `title`, the
`message` (never echoing the value: it may be a secret) and one `check`:
- `pattern`: the value, a string, must fully match `pattern`;
- `forbidden_pattern`: the value must contain no match of `pattern`;
- `not_allowed_when`: while `when` holds the field must be null, or with `value`, must not equal it;
- `required_when`: while `when` holds the field must be set;
- `ssh_key_type`: the first word of an OpenSSH key line is one of `allowed`;
- `ssh_key_data`: the second word is base64 of a key blob that starts with the key type;
- `ssh_rsa_bits`: an `ssh-rsa` key's modulus has at least `min_bits` bits;
- `security_rules`: each rule of a security group list: tcp / udp need `from_port`, `to_port` is not below
  it, the `portless_protocols` take no port, every CIDR block is a network without host bits (checked in
  `domain.security_groups`).
`when` is one condition {"field", "op": "eq"|"ne"|"gt", "value", "default"}: `default` stands in for null.
The rules of one field are checked in order and only the first broken one is reported.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from backend.domain.errors import FieldError
from backend.domain.security_groups import PORTLESS_PROTOCOLS

CLUSTER_NAME_PATTERN = r"[a-z]([a-z0-9-]{0,38}[a-z0-9])?"
# Private keys in every form ssh-keygen, OpenSSL and PuTTY write: OpenSSH, PKCS#8, PKCS#1/SEC1, PPK.
PRIVATE_KEY_PATTERN = r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----|PuTTY-User-Key-File-"
SSH_KEY_TYPES = (
    "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"
)
MIN_RSA_BITS = 2048
DEFAULT_BILLING_TYPE = "on_demand"


@dataclasses.dataclass(frozen=True)
class Rule:
    schema: str
    field: str
    code: str
    title: str
    message: str
    check: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def as_contract(self) -> dict[str, Any]:
        """The rule as published in the OpenAPI document."""
        return {"field": self.field, "code": self.code, "title": self.title, "message": self.message,
                "check": self.check, **self.params}


_MULTI_NODE = {"field": "node_count", "op": "gt", "value": 1, "default": 1}
_RESERVED = {"field": "billing.type", "op": "eq", "value": "reserved", "default": DEFAULT_BILLING_TYPE}
_NOT_RESERVED = {**_RESERVED, "op": "ne"}
_SPOT = {"field": "capacity_type", "op": "ne", "value": "on_demand", "default": "on_demand"}

RULES: tuple[Rule, ...] = (
    Rule("ClusterCreate", "name", "invalid_name", "Invalid Cluster Name",
         "name must be 1-40 lowercase letters, digits or hyphens, starting with a letter and not ending "
         "with a hyphen (it prefixes hostnames)", "pattern", {"pattern": CLUSTER_NAME_PATTERN}),
    Rule("ClusterCreate", "orchestrator", "orchestrator_required", "Orchestrator Required",
         "a cluster of more than one node needs orchestrator slurm or kubernetes; none is only for "
         "single-node clusters", "not_allowed_when", {"value": "none", "when": _MULTI_NODE}),
    Rule("ClusterCreate", "container", "container_requires_single_node", "Container Needs A Single Node",
         "container is only available on single-node clusters: remove container or set node_count = 1",
         "not_allowed_when", {"when": _MULTI_NODE}),
    Rule("ClusterCreate", "billing.duration_days", "required", "Missing Reserved Term",
         "reserved billing needs billing.duration_days (1-90 days)", "required_when",
         {"when": _RESERVED}),
    Rule("ClusterCreate", "billing.duration_days", "not_allowed", "Reserved Term Without Reserved Billing",
         "billing.duration_days is only allowed with billing.type = reserved (the default type is "
         f"{DEFAULT_BILLING_TYPE})", "not_allowed_when",
         {"when": _NOT_RESERVED}),
    Rule("ClusterCreate", "billing.type", "spot_not_reservable", "Spot Capacity Cannot Be Reserved",
         "a reserved term is paid up front for on-demand nodes: use billing.type = on_demand with "
         "capacity_type spot or spot_with_fallback, or capacity_type = on_demand with a reserved term",
         "not_allowed_when", {"value": "reserved", "when": _SPOT}),
    *(
        Rule("SecurityGroupCreate", direction, "invalid_security_rule", "Invalid Security Group Rule",
             f"each {direction} rule: protocol tcp or udp needs from_port (to_port, if set, not below it); "
             f"{' and '.join(PORTLESS_PROTOCOLS)} take no port; cidr_blocks are networks such as "
             "10.0.0.0/8 without host bits", "security_rules",
             {"portless_protocols": list(PORTLESS_PROTOCOLS)})
        for direction in ("ingress", "egress")
    ),
    Rule("SshKeyCreate", "public_key", "private_key", "Private Key Instead Of Public Key",
         "public_key holds a private key, which must never be shared: register the public half instead, "
         "the .pub file next to it (for example ~/.ssh/id_ed25519.pub)", "forbidden_pattern",
         {"pattern": PRIVATE_KEY_PATTERN}),
    Rule("SshKeyCreate", "public_key", "unsupported_key_type", "Unsupported SSH Key Type",
         f"public_key must be an OpenSSH public key line starting with one of {', '.join(SSH_KEY_TYPES)}",
         "ssh_key_type", {"allowed": list(SSH_KEY_TYPES)}),
    Rule("SshKeyCreate", "public_key", "invalid_ssh_key", "Invalid SSH Public Key",
         "public_key must be '<type> <base64 key data> [comment]', the key data holding a key of that "
         "type", "ssh_key_data"),
    Rule("SshKeyCreate", "public_key", "key_too_weak", "SSH Key Too Weak",
         f"RSA keys must have at least {MIN_RSA_BITS} bits: generate a new key with ssh-keygen -t ed25519",
         "ssh_rsa_bits", {"min_bits": MIN_RSA_BITS}),
)


def rules_of(schema: str) -> list[Rule]:
    return [r for r in RULES if r.schema == schema]


def rule(schema: str, code: str) -> Rule:
    return next(r for r in RULES if r.schema == schema and r.code == code)


def value_at(body: Mapping[str, Any], dotted: str) -> Any:
    value: Any = body
    for step in dotted.split("."):
        value = value.get(step) if isinstance(value, Mapping) else None
    return value


def _holds(condition: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    value = value_at(body, condition["field"])
    if value is None:
        value = condition.get("default")
    op, wanted = condition["op"], condition["value"]
    if op == "eq":
        return bool(value == wanted)
    if op == "ne":
        return bool(value != wanted)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > wanted


def broken(one: Rule, body: Mapping[str, Any]) -> bool:
    """Whether `body` breaks a field-comparing rule (the SSH key checks live in `domain.ssh_keys`)."""
    value = value_at(body, one.field)
    if one.check == "pattern":
        return isinstance(value, str) and re.fullmatch(one.params["pattern"], value) is None
    if one.check == "forbidden_pattern":
        return isinstance(value, str) and re.search(one.params["pattern"], value) is not None
    if one.check == "not_allowed_when":
        banned = value is not None and ("value" not in one.params or value == one.params["value"])
        return banned and _holds(one.params["when"], body)
    if one.check == "required_when":
        return value is None and _holds(one.params["when"], body)
    raise ValueError(f"{one.check} is not a field-comparing check")


def broken_rules(schema: str, body: Mapping[str, Any]) -> list[FieldError]:
    """Every field-comparing rule of `schema` that `body` breaks (first per field), as FieldErrors."""
    errors: list[FieldError] = []
    for one in rules_of(schema):
        if one.check.startswith(("ssh_", "security_")) or any(e.path == one.field for e in errors):
            continue
        if broken(one, body):
            errors.append(FieldError(one.field, one.code, one.message))
    return errors


def contract() -> dict[str, list[dict[str, Any]]]:
    """`x-gpucloud-rules` per request schema, for the OpenAPI document."""
    out: dict[str, list[dict[str, Any]]] = {}
    for one in RULES:
        out.setdefault(one.schema, []).append(one.as_contract())
    return out
