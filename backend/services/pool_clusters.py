"""A cluster on a host pool (`host_pool_id`): what its spec may say, checked with the rest of the spec.

The nodes are the project's own servers, so what sells or places datacenter capacity has no meaning for them:
no reservation, spot capacity, reserved billing, reserved IP or autoscaling. Slurm only (as the local
driver: no Kubernetes control plane is packaged for a server), no containers yet (their image store lives on
the backend's machine), and volumes only where the pool declares a shared storage path (a volume is a
directory there). Whether enough hosts are free and fit is the engine's to say at admission
(`backend.provisioning.pool_hosts`), under the pool's lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backend.domain.access import Scope
from backend.domain.catalog import Catalog, InstanceType
from backend.domain.errors import FieldError, validation_failed
from backend.provisioning import pool_hosts
from backend.services import host_pools
from backend.store.host_pool_models import HostPool, HostPoolHost
from backend.store.repository import referenced

# Spec fields that make no sense for servers of one's own: field -> (the value it must keep, why).
_REFUSED = {
    "reservation_id": (None, "a capacity reservation holds datacenter nodes"),
    "capacity_type": ("on_demand", "spot capacity is the datacenter's"),
    "autoscaling": (None, "the engine cannot make servers of one's own; set node_count"),
    "reserved_ip_id": (None, "the login node answers on its own address"),
    "container": (None, "containers are not offered on host pools yet"),
}


def complete(session: Any, catalog: Catalog, project_id: str, spec: Mapping[str, Any], scope: Scope | None
             ) -> dict[str, Any]:
    """The spec with what its pool says where the spec is silent: the region is the pool's, the instance
    type the catalog's that the pool's first fitting ready server is (`check` reports an unknown pool)."""
    found = referenced(session, HostPool, [str(spec["host_pool_id"])], project_id=project_id, scope=scope)
    if not found:
        return dict(spec)
    pool = found[0]
    filled = {**spec, "region": spec.get("region") or pool.region}
    if filled.get("instance_type") is None:
        hosts = host_pools.hosts_of(session, pool.id)
        filled["instance_type"] = next((itype.name for host in hosts for itype in _types_for(catalog, host)),
                                       None)
        if filled["instance_type"] is None:
            raise validation_failed([FieldError(
                "instance_type", "no_fitting_instance_type",
                f"no ready server of host pool {pool.id} has the GPUs of an instance type of the catalog "
                f"({_servers(hosts)}): set instance_type, or wait for the pool's check (GET "
                f"/v1/host-pools/{pool.id})")])
    return filled


def _types_for(catalog: Catalog, host: HostPoolHost) -> list[InstanceType]:
    """The catalog's types whose GPUs the host has, those of its interconnect first."""
    fitting = [itype for itype in catalog.instance_types if pool_hosts.fits(host, itype)]
    kind = (host.inventory or {}).get("interconnect")
    return sorted(fitting, key=lambda itype: kind not in itype.interconnects)


def _servers(hosts: Sequence[HostPoolHost]) -> str:
    """The first servers, each with its state and GPUs, for an error message."""
    if not hosts:
        return "it has no server"
    seen = [f"{host.address}: {host.status}, {(host.inventory or {}).get('gpu_count') or 0} x "
            f"{(host.inventory or {}).get('gpu_model') or 'no GPU'}" for host in hosts[:4]]
    return "; ".join(seen) + ("; ..." if len(hosts) > 4 else "")


def check(session: Any, project_id: str, spec: Mapping[str, Any], scope: Scope | None) -> list[FieldError]:
    """Every reason the spec cannot run on its `host_pool_id`, each naming the field to fix."""
    ref = str(spec["host_pool_id"])
    found = referenced(session, HostPool, [ref], project_id=project_id, scope=scope)
    if not found:
        return [FieldError("host_pool_id", "not_found", f"no host pool with id {ref!r} in this project")]
    pool = found[0]
    errors = []
    if spec.get("region") != pool.region:
        errors.append(
            FieldError(
                "region",
                "host_pool_region",
                f"host pool {pool.id} is in region {pool.region}; set region = {pool.region!r}",
            )
        )
    if spec.get("orchestrator") != "slurm":
        errors.append(
            FieldError(
                "orchestrator",
                "unsupported_on_host_pool",
                'clusters on a host pool run Slurm; set orchestrator = "slurm"',
            )
        )
    for field, (allowed, why) in _REFUSED.items():
        if spec.get(field) not in (allowed, None):
            errors.append(FieldError(field, "unsupported_on_host_pool", f"{why}: leave {field} out"))
    if (spec.get("billing") or {}).get("type", "on_demand") != "on_demand":
        errors.append(
            FieldError(
                "billing.type",
                "unsupported_on_host_pool",
                "servers of one's own carry no compute charge to reserve: leave billing out",
            )
        )
    if spec.get("container_images"):
        errors.append(
            FieldError(
                "container_images",
                "unsupported_on_host_pool",
                "containers are not offered on host pools yet: leave container_images out",
            )
        )
    if spec.get("volume_ids") and not pool.shared_storage_path:
        errors.append(
            FieldError(
                "volume_ids",
                "no_shared_storage",
                f"host pool {pool.id} declares no shared_storage_path, so its servers share no file system "
                "to keep volumes on: set shared_storage_path on the pool (a path mounted on every host), or "
                "leave volume_ids out",
            )
        )
    return errors
