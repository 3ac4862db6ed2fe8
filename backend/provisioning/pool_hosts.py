"""The servers of a host pool as the engine's capacity: a node of a cluster on a pool holds one host
(`host_pool_hosts.node_id`) from its admission until its release, as a datacenter node holds its slot.

Hosts are taken under the pool's lock, in the order the user listed them: `ready` ones that no node holds
and that have the GPUs of the cluster's instance type (count and model, from the last check's inventory).
A node's address is its host's. The engine releases a node's host with its other allocations
(`allocator.release_node` / `release_cluster`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from backend.domain import host_pools as rules
from backend.domain.catalog import Fabric, InstanceType
from backend.domain.errors import Conflict
from backend.domain.host_pools import MAX_HOSTS
from backend.fabric.slurm import NodeShape
from backend.store.engine_models import EngineCluster, EngineNode
from backend.store.host_pool_models import HostPool, HostPoolHost
from backend.store.models import Cluster

OWN_FABRIC = "own-hosts"


class NoFreeHosts(Conflict):
    code = "insufficient_capacity"


Lock = Callable[[Session, str], None]


def fits(host: HostPoolHost, itype: InstanceType) -> bool:
    """A ready host with the shape's GPUs: as many, of its model (the catalog's GPU name in nvidia-smi's)."""
    inventory = host.inventory or {}
    if host.status != "ready" or int(inventory.get("gpu_count") or 0) != itype.gpu_count:
        return False
    model = str(inventory.get("gpu_model") or "").lower()
    return itype.gpu_count == 0 or itype.gpu_short_name.lower() in model


def take(
    session: Session, cluster: Cluster, itype: InstanceType, count: int, lock: Lock
) -> list[HostPoolHost]:
    """`count` free hosts that fit, for nodes the caller makes (`hold`), chosen under the pool's lock (taken
    with `lock`, the allocator's); 409 naming how many are free."""
    assert cluster.host_pool_id is not None
    lock(session, f"host-pool:{cluster.host_pool_id}")
    hosts = session.scalars(
        select(HostPoolHost)
        .where(HostPoolHost.pool_id == cluster.host_pool_id)
        .order_by(HostPoolHost.position)
    ).all()
    free = [host for host in hosts if host.node_id is None and fits(host, itype)]
    if len(free) < count:
        ready = sum(1 for host in hosts if host.status == "ready")
        raise NoFreeHosts(
            f"{count} hosts with {itype.gpu_count} x {itype.gpu_short_name.upper()} requested from host "
            f"pool {cluster.host_pool_id}, {len(free)} free ({ready} of its {len(hosts)} hosts ready, the "
            "others held by clusters or of another shape); add hosts to the pool, wait for their checks, or "
            "lower node_count",
            field="node_count",
            extra={"requested_nodes": count, "available_nodes": len(free)},
        )
    return free[:count]


def hold(host: HostPoolHost, node: EngineNode) -> None:
    host.node_id = node.id


def fabric_of(cluster: Cluster) -> Fabric:
    """The network of a pool cluster's servers, as the layout names it: the servers' own, of the cluster's
    `interconnect`, no scalable units of the cloud's (Slurm's node feature, `fabric` in the API)."""
    return Fabric(
        region=cluster.region,
        name=OWN_FABRIC,
        kind=cluster.interconnect,
        pools={cluster.instance_type: MAX_HOSTS},  # as many as a pool has
        spines=0,
        leaves_per_su=0,
    )


def give_back_nodes(session: Session, node_ids: Sequence[str]) -> None:
    """The hosts of these nodes are free again (their release has given each server back)."""
    if node_ids:
        session.execute(
            update(HostPoolHost)
            .where(HostPoolHost.node_id.in_(list(node_ids)))
            .values(node_id=None)
            .execution_options(synchronize_session=False)
        )


def give_back_cluster(session: Session, cluster_id: str) -> None:
    give_back_nodes(
        session, session.scalars(select(EngineNode.id).where(EngineNode.cluster_id == cluster_id)).all()
    )


def gone_clusters(session: Session, pool_id: str) -> frozenset[str]:
    """The pool's clusters that are no more (torn down, or rolled back)."""
    query = (
        select(Cluster.id)
        .join(EngineCluster, EngineCluster.cluster_id == Cluster.id)
        .where(Cluster.host_pool_id == pool_id, EngineCluster.finished.is_(True))
    )
    return frozenset(session.scalars(query))


def address_of(host: HostPoolHost) -> str:
    """The address a node on `host` has: the IP its check reached (a DNS name resolved once, as the
    backend saw it), else the address as the user gave it."""
    return str((host.inventory or {}).get("ip") or host.address)


def held_host(session: Session, node_id: str) -> HostPoolHost | None:
    return session.scalars(select(HostPoolHost).where(HostPoolHost.node_id == node_id)).first()


def node_shapes(session: Session, cluster_id: str) -> dict[str, NodeShape]:
    """Each node's server as its last check read it (CPUs, memory), by node name: what Slurm is told the
    node has. A node whose server's inventory lacks either keeps the catalog's shape."""
    query = (
        select(EngineNode.name, HostPoolHost.inventory)
        .join(HostPoolHost, HostPoolHost.node_id == EngineNode.id)
        .where(EngineNode.cluster_id == cluster_id)
    )
    shapes = {}
    for name, inventory in session.execute(query):
        shape = node_shape(inventory or {})
        if shape is not None:
            shapes[name] = shape
    return shapes


def node_shape(inventory: Mapping[str, Any]) -> NodeShape | None:
    """What Slurm is told a server has: CPUs and memory, with their layout and each GPU's cores where the
    check read them (None without CPUs or memory)."""
    cpus, memory = inventory.get("cpu_count"), inventory.get("memory_mib")
    if not (isinstance(cpus, int) and isinstance(memory, int) and cpus > 0 and memory > 0):
        return None
    gpu_cores = [gpu.get("cores") for gpu in sorted(inventory.get("gpus") or [], key=lambda g: g["index"])]
    return NodeShape(
        cpus=cpus, memory_mib=memory, sockets=inventory.get("sockets"),
        cores_per_socket=inventory.get("cores_per_socket"),
        threads_per_core=inventory.get("threads_per_core"),
        gpu_cores=tuple(gpu_cores) if gpu_cores and all(gpu_cores) else (),
    )


def pool_of(session: Session, cluster: Cluster) -> HostPool | None:
    return None if cluster.host_pool_id is None else session.get(HostPool, cluster.host_pool_id)


def bastion(pool: HostPool) -> tuple[str | None, str, int] | None:
    """The pool's bastion as `(user or None, host, port)`, or None."""
    jump = rules.parse_proxy_jump(pool.proxy_jump) if pool.proxy_jump else None
    return jump if isinstance(jump, tuple) else None


def login_command(user: str, address: str, bastion: tuple[str | None, str, int] | None) -> str:
    """How a cluster's user logs in to a node at `address`: through the pool's bastion (`bastion(pool)`)
    when it has one, as whoever the user is there (the pool's own login user is not theirs)."""
    if bastion is None:
        return f"ssh {user}@{address}"
    _, host, port = bastion
    where = host if port == 22 else (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return f"ssh -J {where} {user}@{address}"
