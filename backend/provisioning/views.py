"""Read models of the engine's state: the runtime part of a cluster response and the artifacts.

Everything is generated from the stored placement on every read, so Slurm and Kubernetes artifacts
always reflect the current membership. Secrets (the Kubernetes admin token) never appear here except in
`cluster_credentials`, which only the admin-only, audited credentials route calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog, default_catalog
from backend.domain.lifecycle import NodeStage
from backend.fabric import kubernetes, slurm
from backend.fabric.layout import ClusterLayout, NodeLayout
from backend.fabric.nccl import nccl_env
from backend.fabric.topology import node_network
from backend.provisioning import cluster_images, node_health, pool_hosts
from backend.provisioning.drivers import configured_capabilities
from backend.provisioning.state import aware
from backend.store.db import execute_core
from backend.store.engine_models import EngineCluster, EngineNode, PhaseRecord
from backend.store.host_pool_models import HostPool
from backend.store.models import Cluster

ARTIFACTS = {
    "slurm.conf": "text/plain",
    "gres.conf": "text/plain",
    "cgroup.conf": "text/plain",
    "topology.conf": "text/plain",
    "hosts": "text/plain",
    "kubernetes-nodes.json": "application/json",
}
SSH_USER = "ubuntu"


# The columns a read view needs of a live node: one light row per node instead of an ORM instance.
_NODE_COLUMNS = (EngineNode.id, EngineNode.name, EngineNode.active_name, EngineNode.index, EngineNode.slot,
                 EngineNode.scalable_unit, EngineNode.private_ip, EngineNode.public_ip, EngineNode.status,
                 EngineNode.status_reason, EngineNode.stage, EngineNode.repair_of, EngineNode.pending_action,
                 EngineNode.degraded_reason, EngineNode.capacity_type, EngineNode.preempt_at,
                 EngineNode.preempt_notice_at, EngineNode.host_key)


# Read statements are built once (SQLAlchemy also memoizes their cache keys): the GET path runs them all.
_LIVE_NODES = (
    select(*_NODE_COLUMNS)
    .where(EngineNode.cluster_id == bindparam("cluster_id"), EngineNode.stage != str(NodeStage.RELEASED))
    .order_by(EngineNode.index, EngineNode.created_at)
)
_PHASE_HISTORY = (
    select(PhaseRecord.phase, PhaseRecord.at, PhaseRecord.detail)
    .where(PhaseRecord.cluster_id == bindparam("cluster_id"))
    .order_by(PhaseRecord.id)
)


def _live_node_rows(session: Session, cluster_id: str) -> list[Any]:
    """live_nodes (same filter and order) as column rows: members and nodes still being torn down."""
    return list(execute_core(session, _LIVE_NODES, {"cluster_id": cluster_id}))


# The engine state a read view needs (the admin token stays out: it is served by /credentials only).
_STATE_COLUMNS = (EngineCluster.fabric, EngineCluster.hostname_prefix, EngineCluster.subnet,
                  EngineCluster.partition_key, EngineCluster.jumphost_ip, EngineCluster.public_ip,
                  EngineCluster.kube_ca_cert_pem, EngineCluster.login_host_key, EngineCluster.images,
                  EngineCluster.images_token, EngineCluster.finished)


_STATE = select(*_STATE_COLUMNS).where(EngineCluster.cluster_id == bindparam("cluster_id"))

# The same columns for a read of the cluster row that outer-joins its engine state (the GET path, see
# services.clusters.read_cluster): prefixed, since the clusters table has columns of the same names.
JOINED_STATE_COLUMNS = (EngineCluster.cluster_id.label("engine_cluster_id"),
                        *(column.label(f"engine_{column.key}") for column in _STATE_COLUMNS))
_STATE_KEYS = tuple(column.key for column in _STATE_COLUMNS)


@dataclass(frozen=True)
class _JoinedState:
    fabric: Any
    hostname_prefix: Any
    subnet: Any
    partition_key: Any
    jumphost_ip: Any
    public_ip: Any
    kube_ca_cert_pem: Any
    login_host_key: Any
    images: Any
    images_token: Any
    finished: Any


def _state_row(session: Session, cluster_id: str, cluster: Any = None) -> Any:
    if cluster is not None and "engine_cluster_id" in getattr(cluster, "_fields", ()):
        # A Core row read with JOINED_STATE_COLUMNS: the engine state came with it.
        if cluster.engine_cluster_id is None:
            return None
        return _JoinedState(**{key: getattr(cluster, f"engine_{key}") for key in _STATE_KEYS})
    return execute_core(session, _STATE, {"cluster_id": cluster_id}).one_or_none()


def _layout(cluster: Cluster, state: Any, members: list[Any],
            catalog: Catalog) -> ClusterLayout | None:
    if state is None or state.finished:
        return None
    itype = catalog.instance_type(cluster.instance_type)
    on_pool = getattr(cluster, "host_pool_id", None) is not None
    fabric = pool_hosts.fabric_of(cluster) if on_pool else catalog.fabric(cluster.region, state.fabric)
    if itype is None or fabric is None:
        return None
    nodes = tuple(NodeLayout(n.name, n.index, n.slot, n.scalable_unit, n.private_ip, n.public_ip)
                  for n in members)
    return ClusterLayout(cluster.id, state.hostname_prefix, cluster.region, cluster.orchestrator,
                         cluster.interconnect, itype, fabric, state.subnet, state.partition_key, nodes,
                         state.jumphost_ip, state.public_ip)


def cluster_layout(session: Session, cluster_id: str, catalog: Catalog | None = None) -> ClusterLayout | None:
    """The placed layout of a cluster (member nodes only), or None before admission / after the end."""
    cluster = session.get(Cluster, cluster_id)
    state = session.get(EngineCluster, cluster_id)
    if cluster is None or state is None or state.finished:
        return None
    members = [n for n in _live_node_rows(session, cluster_id) if n.active_name is not None]
    return _layout(cluster, state, members, catalog or default_catalog())


def _pool_network(layout: ClusterLayout, position: int) -> dict[str, Any]:
    """A pool server's network as the API shows it: the servers' own (no rail, leaf or spine of the
    cloud's); `position` is the host's place in the pool's list."""
    return {"fabric": layout.fabric.name, "fabric_kind": layout.fabric.kind, "scalable_unit": 0,
            "position": position, "spines": []}


def _login_address(layout: ClusterLayout) -> str | None:
    """Where `ssh` reaches the login node. A host-network driver's nodes (the local driver's) have no
    public address: the host reaches the login node (jumphost or single node) at its private address
    through the cluster's bridge, so that is the address reported (docs/local-driver.md)."""
    offered = configured_capabilities()
    if offered is not None and offered.host_network:
        return layout.controller_ip
    return layout.public_ip


def _login_host_key(layout: ClusterLayout, state: Any, members: list[Any]) -> str | None:
    """The login host's SSH host key: the jumphost's for a multi-node cluster, else the node's."""
    key = state.login_host_key if layout.multi_node else next(
        (n.host_key for n in members if n.name == layout.controller), None)
    return None if key is None else str(key)


def _iso(value: Any) -> str | None:
    stamp = aware(value)
    return None if stamp is None else stamp.isoformat().replace("+00:00", "Z")


def _node_view(n: Any, role: str, network: dict[str, Any] | None, *, member: bool = True) -> dict[str, Any]:
    # instance_id names the machine: a replaced node keeps its name but gets a new instance. Health is
    # the engine's state with the degraded reason the metrics sampler last recorded: no node is asked (a
    # machine leaving the cluster has none).
    health = node_health.health(n, n.degraded_reason) if member else None
    return {"name": n.name, "instance_id": n.id, "role": role, "index": n.index, "status": n.status,
            "status_reason": n.status_reason, "health": health, "private_ip": n.private_ip,
            "public_ip": n.public_ip, "network": network, "capacity_type": n.capacity_type,
            "host_key": n.host_key,
            # Spot: set once the market gave notice, with the moment the node is reclaimed.
            "preemption_at": _iso(n.preempt_at) if n.preempt_notice_at is not None else None}


def cluster_runtime(session: Session, cluster_id: str, cluster: Cluster | Any = None) -> dict[str, Any]:
    """nodes, login, slurm, kubernetes, nccl_env, fabric and phase_history of one cluster.

    `cluster`: the caller's already loaded row, ORM or a Core row of the clusters table (saves a lookup);
    a Core row read with `JOINED_STATE_COLUMNS` brings the engine state too (saves another).
    One query each for the phase history, the engine state (unless joined) and the live nodes.
    """
    catalog = default_catalog()
    history = [
        {"phase": r.phase, "at": _iso(r.at), "detail": r.detail}
        for r in execute_core(session, _PHASE_HISTORY, {"cluster_id": cluster_id})
    ]
    runtime: dict[str, Any] = {"nodes": [], "login": None, "slurm": None, "kubernetes": None,
                               "nccl_env": {}, "fabric": None, "phase_history": history}
    cluster = cluster if cluster is not None else session.get(Cluster, cluster_id)
    state = _state_row(session, cluster_id, cluster)
    if cluster is not None:
        runtime.update(_images(cluster, state))
    if cluster is None or state is None or state.finished:
        return runtime
    live = _live_node_rows(session, cluster_id)
    nodes = [n for n in live if n.active_name is not None]
    layout = _layout(cluster, state, nodes, catalog)
    if layout is None:
        return runtime
    # Live nodes without an active name are released ones still being torn down.
    leaving = [n for n in live if n.active_name is None]
    role = "worker" if layout.multi_node else "standalone"
    on_pool = getattr(cluster, "host_pool_id", None) is not None
    runtime["nodes"] = [
        _node_view(n, role, _pool_network(layout, n.slot) if on_pool
                   else node_network(layout.fabric, layout.instance_type, n.slot, layout.partition_key))
        for n in nodes
    ] + [_node_view(n, role, None, member=False) for n in leaving]
    # A pool cluster's controller and login node is its first server (no jumphost), at its own address.
    controller = layout.nodes[0].name if on_pool and layout.nodes else layout.controller
    address = layout.controller_ip if on_pool else _login_address(layout)
    pool = session.get(HostPool, cluster.host_pool_id) if on_pool else None
    bastion = pool_hosts.bastion(pool) if pool is not None else None
    runtime["login"] = {"host": controller, "public_ip": address, "user": SSH_USER,
                        "ssh_command": pool_hosts.login_command(SSH_USER, str(address), bastion),
                        "host_key": _login_host_key(layout, state, nodes)}
    runtime["fabric"] = {"name": layout.fabric.name, "kind": layout.fabric.kind,
                         "partition_key": layout.partition_key, "subnet": layout.subnet,
                         "scalable_units": sorted({n.scalable_unit for n in layout.nodes})}
    runtime["nccl_env"] = nccl_env(layout.interconnect, layout.instance_type)
    base = f"/v1/clusters/{cluster_id}/artifacts"
    if layout.orchestrator == "slurm":
        declared = [p["name"] for p in (getattr(cluster, "slurm_config", None) or {}).get("partitions") or []]
        runtime["slurm"] = {"controller": controller, "partition": "gpu",
                            "partitions": ["gpu", *declared],
                            "artifacts": {name: f"{base}/{name}" for name in
                                          ("slurm.conf", "gres.conf", "topology.conf", "hosts")}}
    if layout.orchestrator == "kubernetes":
        runtime["kubernetes"] = {
            "api_endpoint": kubernetes.api_endpoint(layout),
            "ca_certificate": state.kube_ca_cert_pem,
            "node_objects_url": f"{base}/kubernetes-nodes.json",
            "credentials_url": f"/v1/clusters/{cluster_id}/credentials",
        }
    return runtime


def _images(cluster: Any, state: Any) -> dict[str, Any]:
    """images, image_storage_bytes and the registry credentials' usernames (never their passwords)."""
    recorded = state.images if state is not None else None
    importing = state is not None and state.images_token is not None
    return {"images": cluster_images.image_views(cluster, recorded, importing),
            "image_storage_bytes": cluster_images.storage_bytes(recorded),
            "registry_credentials": {registry: {"username": username}
                                     for registry, username in (cluster.registry_usernames or {}).items()}}


def artifact(session: Session, cluster_id: str, name: str) -> str | None:
    """One generated file of a cluster, or None when it has no such artifact (now)."""
    layout = cluster_layout(session, cluster_id)
    if layout is None or name not in ARTIFACTS:
        return None
    if name == "kubernetes-nodes.json":
        if layout.orchestrator != "kubernetes":
            return None
        networks = {n.name: {"partition_key": layout.partition_key} for n in layout.nodes}
        return json.dumps({"apiVersion": "v1", "kind": "List",
                           "items": kubernetes.node_objects(layout, networks)}, indent=2)
    if layout.orchestrator != "slurm":
        return None
    if name == "slurm.conf":  # with the user's partitions, prolog and epilog; a pool's servers as they are
        cluster = session.get(Cluster, cluster_id)
        return slurm.slurm_conf(layout, config=cluster.slurm_config if cluster is not None else None,
                                shapes=pool_hosts.node_shapes(session, cluster_id))
    if name == "gres.conf":
        return slurm.gres_conf(layout, shapes=pool_hosts.node_shapes(session, cluster_id))
    generators: dict[str, Callable[[ClusterLayout], str]] = {
        "cgroup.conf": slurm.cgroup_conf,
        "topology.conf": slurm.topology_conf, "hosts": slurm.hosts_file}
    return generators[name](layout)


def cluster_credentials(session: Session, cluster_id: str) -> dict[str, Any] | None:
    """The admin kubeconfig (secret) of a Kubernetes cluster; None for other orchestrators."""
    layout = cluster_layout(session, cluster_id)
    state = session.get(EngineCluster, cluster_id)
    if layout is None or state is None or layout.orchestrator != "kubernetes":
        return None
    if state.kube_ca_cert_pem is None or state.kube_admin_token is None:
        return None
    return {"kubeconfig": kubernetes.kubeconfig(layout, state.kube_ca_cert_pem, state.kube_admin_token),
            "api_endpoint": kubernetes.api_endpoint(layout)}
