"""The hosts of a gpucloud_host_pool: the `hosts` input as the configuration writes it, and `host_status`,
what the backend's last check found on each."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from provider.framework import Int64Attribute, StringAttribute, rfc3339_utc
from provider.framework.validators import ValueValidator
from provider.resources.api_rules import field_validators

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")


def _is_address(value: str) -> bool:
    """The API's rule (backend/domain/host_pools.py: address_error): an IP address or a DNS name."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(value))


# Checked at plan time as the API checks it at apply (the walk lists `invalid_address` as apply-time: it
# walks the contract's JSON Schema rules, and this one is the API's parser).
ADDRESS = ValueValidator(
    "must be an IP address or a DNS name, such as 10.0.0.5 or gpu-a.lab.example", _is_address
)


def pool_rules(field: str, **text: str) -> Any:
    """The validators of a `HostPoolCreate` field, from the API contract (`text` words its patterns)."""
    return field_validators("HostPoolCreate", field, text=text or None)


def computed(description: str, kind: type = StringAttribute) -> Any:
    return kind(computed=True, description=description)


HOST_INPUT = {
    "address": StringAttribute(
        required=True,
        description="IP address or DNS name the backend connects to, for example `10.0.0.5`.",
        validators=[*pool_rules("hosts[].address"), ADDRESS],
    ),
    "port": Int64Attribute(
        optional=True,
        description="SSH port of this host, when it is not the pool's `ssh_port`.",
        validators=pool_rules("hosts[].port"),
    ),
    "host_key": StringAttribute(
        optional=True,
        description="The host's SSH key to require (`ssh-ed25519 AAAA...`, from "
        "`/etc/ssh/ssh_host_ed25519_key.pub`). Left null, the first key seen is recorded and required from "
        "then on (trust on first use); the recorded key is in `host_status`.",
        validators=pool_rules("hosts[].host_key"),
    ),
}
HOST_STATUS = {
    "address": computed("Address of the host, as listed in `hosts`."),
    "port": computed("SSH port used (the host's own, else the pool's).", Int64Attribute),
    "status": computed(
        "`pending` (not checked yet), `ready`, `degraded` (reachable, but a check failed) or `unreachable`."
    ),
    "reason_code": computed(
        "Why the host is not ready: `auth_refused`, `host_key_changed`, `unreachable`, `no_sudo`, "
        "`not_linux`, `package_missing`, `clock_skew` or `agent_failed`; null when ready or pending."
    ),
    "reason": computed("The cause and the fix in a sentence, when the host is not ready."),
    "host_key": computed("The host's key: the pinned one, or the one recorded at the first connection."),
    "checked_at": computed("When the host was last checked (RFC 3339, UTC); null before the first check."),
    "gpu_count": computed("GPUs found on the host (null before a successful check).", Int64Attribute),
    "gpu_model": computed("GPU model, for example `NVIDIA H200`; null without GPUs."),
    "cpu_count": computed("CPU threads of the host.", Int64Attribute),
    "memory_mib": computed("Memory of the host in MiB.", Int64Attribute),
    "cluster_id": computed(
        "Id of the `gpucloud_gpu_cluster` whose node the host is (`host_pool_id`); null while it is free."
    ),
    "node": computed("Name of that cluster's node on the host (`<cluster name>-<index>`); null while free."),
}


def hosts_body(hosts: Any) -> list[dict[str, Any]]:
    """The API's `hosts` from the attribute's (the API takes the same fields)."""
    return [{name: host.get(name) for name in HOST_INPUT} for host in hosts or []]


def _same_key(pinned: Any, recorded: Any) -> bool:
    """A pin and the key the API keeps for it agree on type and key data (the API drops the comment)."""
    if not isinstance(pinned, str) or not isinstance(recorded, str):
        return False
    return pinned.split()[:2] == recorded.split()[:2]


def configured_hosts(api_hosts: list[dict[str, Any]], prior: Any, pool_port: int) -> list[dict[str, Any]]:
    """The API's hosts as the configuration writes them: a port equal to the pool's stays null when it
    was, and a key the API recorded by itself (trust on first use) stays out of `hosts` (it is in
    `host_status`); a host added outside Terraform shows with its port and no key."""
    earlier = {
        (str(h["address"]).lower(), h.get("port") or pool_port): h for h in prior or [] if isinstance(h, dict)
    }
    out = []
    for host in api_hosts:
        port = int(host["port"])
        known = earlier.get((str(host["address"]).lower(), port))
        if known is None:
            out.append({"address": host["address"], "port": None if port == pool_port else port,
                        "host_key": None})
            continue
        pinned = known.get("host_key")
        recorded = host.get("host_key")
        out.append({
            "address": known["address"],
            "port": known.get("port"),
            "host_key": None if pinned is None else (pinned if _same_key(pinned, recorded) else recorded),
        })
    return out


def host_status(host: Mapping[str, Any]) -> dict[str, Any]:
    """One element of `host_status`: the API's view of a host, with the inventory's main figures."""
    inventory = host.get("inventory") or {}
    checked = host.get("checked_at")
    return {
        "address": host["address"],
        "port": host["port"],
        "status": host["status"],
        "reason_code": host.get("reason_code"),
        "reason": host.get("reason"),
        "host_key": host.get("host_key"),
        "checked_at": rfc3339_utc(checked) if checked else None,
        "gpu_count": inventory.get("gpu_count"),
        "gpu_model": inventory.get("gpu_model"),
        "cpu_count": inventory.get("cpu_count"),
        "memory_mib": inventory.get("memory_mib"),
        "cluster_id": host.get("cluster_id"),
        "node": host.get("node"),
    }
