"""The engine's entry point for the API: `request_reconcile`, called in the same transaction as every
cluster create / patch / delete / attach / detach.

Admission happens here, synchronously: capacity is checked and held (node slots, partition key,
subnet, IPs) in the caller's transaction, so a create that cannot be placed fails with 409
`insufficient_capacity` and nothing at all is stored. Everything slow happens later in the reconciler.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog, Fabric, default_catalog
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, FieldError, validation_failed
from backend.domain.lifecycle import ClusterPhase, NodeStatus
from backend.fabric import addressing
from backend.fabric.kubernetes import new_control_plane_credentials
from backend.fabric.topology import slot_position
from backend.provisioning import allocator, pool_hosts, public_address, reservations, scale_down, spot
from backend.provisioning.drivers import local_address_range, offered_orchestrators
from backend.provisioning.settings import configured_driver
from backend.provisioning.state import (
    live_nodes,
    new_node,
    set_cluster_status,
    set_phase,
    wake,
)
from backend.store.billing_models import CapacityReservation
from backend.store.engine_models import EngineCluster, EngineNode
from backend.store.models import Cluster, ReservedIp


class InsufficientCapacity(Conflict):
    code = "insufficient_capacity"


# A pool cluster's nodes have their servers' addresses: no block of the cloud's is held for it.
POOL_SUBNET = "0.0.0.0/32"


def request_reconcile(session: Session, cluster_id: str, *, remove_node_names: Sequence[str] = (),
                      catalog: Catalog | None = None, now: dt.datetime | None = None) -> None:
    """Admit or re-admit the cluster's spec and queue a reconcile pass, at the caller's `now` (the time of
    its transaction, from its clock; None: the system clock's).

    Raises 409 `insufficient_capacity` (create or scale-up that cannot be placed), 409
    `deletion_protection` (delete of a protected cluster) or 422 (bad `remove_node_names`).
    """
    catalog = catalog or default_catalog()
    now = now or utcnow()
    cluster = session.get(Cluster, cluster_id)
    if cluster is None:
        raise ValueError(f"cluster {cluster_id} does not exist")
    wake(session, cluster_id, now)  # first: serialises with a worker pass on this cluster
    state = session.get(EngineCluster, cluster_id)
    if cluster.deletion_requested_at is not None:
        if cluster.deletion_protection:
            raise Conflict("deletion_protection is enabled on this cluster; set it to false first",
                           field="deletion_protection", code="deletion_protected")
        if state is None or state.finished:  # nothing (left) to tear down, e.g. a rolled-back create
            public_address.let_go_at_end(session, cluster, now)
            set_cluster_status(cluster, str(NodeStatus.DESTROYED), None)
            set_phase(session, cluster, str(ClusterPhase.DELETED), now)
        return
    if state is None:
        if cluster.host_pool_id is not None:
            _admit_on_pool(session, catalog, cluster, now)
            return
        _check_driver_offers(cluster)
        _admit(session, catalog, cluster, now)
        return
    if state.finished or state.rollback_reason is not None:
        return
    members = [n for n in live_nodes(session, cluster_id) if n.active_name is not None]
    staying = scale_down.staying(members)
    if remove_node_names:
        _remove_named(cluster, staying, list(remove_node_names), cluster.node_count, now)
    elif cluster.node_count < len(staying):
        # The newest are marked; the reconcile pass swaps a busy one for an idle member and lets a busy
        # one finish its jobs within scale_down_grace_minutes (backend.provisioning.scale_down).
        scale_down.request(cluster, staying, now)
    elif cluster.node_count > len(staying):
        missing = cluster.node_count - len(staying)
        missing -= scale_down.keep(members, missing, now)  # nodes still leaving stay first
        if missing > 0:
            _scale_up(session, catalog, cluster, state, members, missing, now)
    if cluster.status != str(NodeStatus.FAILED):
        cluster.status_reason = None


def pause_cluster(session: Session, cluster_id: str, reason: str, *, now: dt.datetime | None = None) -> None:
    """Hold a cluster (billing: credits exhausted) until `resume_cluster`: its running nodes are powered
    off through the driver (node status PAUSED, slots kept), nodes still coming up wait where they are, no
    other change is applied and the cluster's status is PAUSED; deletion still proceeds."""
    state = session.get(EngineCluster, cluster_id)
    cluster = session.get(Cluster, cluster_id)
    if state is None or cluster is None or state.finished:
        return
    state.paused_reason = reason
    wake(session, cluster_id, now or utcnow())


def resume_cluster(session: Session, cluster_id: str, reason: str, *, now: dt.datetime | None = None) -> None:
    """Undo `pause_cluster`: powered-off nodes are powered on (RUNNING again once booted) and the
    reconciler applies whatever changed meanwhile."""
    del reason
    state = session.get(EngineCluster, cluster_id)
    if state is None or state.paused_reason is None:
        return
    state.paused_reason = None
    wake(session, cluster_id, now or utcnow())


def _check_driver_offers(cluster: Cluster) -> None:
    driver, offered = configured_driver(), offered_orchestrators()
    if cluster.orchestrator not in offered:
        raise validation_failed([FieldError(
            "orchestrator", "unsupported_by_driver",
            f"the {driver} provisioning driver (GPUCLOUD_DRIVER) cannot run orchestrator "
            f"{cluster.orchestrator}; it offers {', '.join(offered) or 'none'}")])


def _admit(session: Session, catalog: Catalog, cluster: Cluster, now: dt.datetime) -> None:
    itype = catalog.instance_type(cluster.instance_type)
    region = catalog.region(cluster.region)
    if itype is None or region is None:
        raise ValueError(f"cluster {cluster.id}: spec not validated against the catalog")
    fabric_name = _draw(session, cluster, cluster.node_count, now)
    placed = allocator.place(session, catalog, now=now, region=cluster.region, instance_type=itype.name,
                             interconnect=cluster.interconnect, count=cluster.node_count,
                             fabric_name=fabric_name, reservation_id=cluster.reservation_id)
    if placed is None:
        raise _no_capacity(session, catalog, cluster, cluster.node_count, now, fabric_name=fabric_name)
    fabric, slots = placed
    kinds, tickets = _capacity_kinds(session, catalog, cluster, fabric.name, spot_wanted=cluster.node_count,
                                     on_demand_wanted=cluster.node_count)
    if len(kinds) < cluster.node_count:
        raise _spot_short(session, catalog, cluster, fabric.name, cluster.node_count)
    partition_key = None
    if fabric.kind == "infiniband":
        found = allocator.next_partition_key(session, fabric)
        if found is None:
            raise InsufficientCapacity(f"fabric {fabric.name} has no free InfiniBand partition key",
                                       field="region")
        pkey_pool, partition_key = found
        allocator.add(session, kind=allocator.PARTITION_KEY, pool=pkey_pool, value=partition_key,
                      cluster_id=cluster.id, node_id=None, now=now)
    reserved = session.get(ReservedIp, cluster.reserved_ip_id) if cluster.reserved_ip_id else None
    addresses = allocator.next_addresses(session, catalog, region.name, fabric.name,
                                         override=local_address_range(), public=reserved is None)
    if addresses is None:
        raise InsufficientCapacity(f"region {region.name} has run out of addresses for fabric {fabric.name}",
                                   field="region")
    subnet, public_ip = addresses
    allocator.add(session, kind=allocator.SUBNET, pool=allocator.ADDRESS_POOL, value=subnet,
                  cluster_id=cluster.id, node_id=None, now=now)
    if reserved is not None:  # the login node answers on the cluster's reserved IP
        public_ip = reserved.address
    else:
        assert public_ip is not None
        allocator.add(session, kind=allocator.PUBLIC_IP, pool=allocator.ADDRESS_POOL, value=public_ip,
                      cluster_id=cluster.id, node_id=None, now=now)
    multi_node = cluster.node_count > 1
    jumphost_ip = _add_jumphost_ip(session, cluster, subnet, now) if multi_node else None
    state = EngineCluster(
        cluster_id=cluster.id, fabric=fabric.name, hostname_prefix=cluster.name, subnet=subnet,
        partition_key=partition_key, public_ip=public_ip, jumphost_ip=jumphost_ip, control_plane="absent",
        current_batch=1, membership_version=1, finished=False,
    )
    if cluster.orchestrator == "kubernetes":
        state.kube_ca_cert_pem, state.kube_admin_token = new_control_plane_credentials(cluster.name, now)
    session.add(state)
    session.flush()
    nodes = [_add_node(session, catalog, cluster, state, index=index, slot=slot, batch=1, attempt=1,
                       public_ip=None if multi_node else public_ip, now=now, capacity_type=kind)
             for index, (slot, kind) in enumerate(zip(slots, kinds, strict=True))]
    _hold_slots(session, cluster, state, nodes, now)
    spot.hold_tickets(session, cluster, fabric.name, tickets, nodes, now)
    set_cluster_status(cluster, str(NodeStatus.PENDING), None)
    set_phase(session, cluster, str(ClusterPhase.ADMITTED), now,
              f"{cluster.node_count} x {itype.name} held on {fabric.name}")


def _admit_on_pool(session: Session, catalog: Catalog, cluster: Cluster, now: dt.datetime) -> None:
    """A cluster on the project's own servers: one free host of its pool per node (the node's address is
    the host's), no slot, subnet or public address; the first node runs slurmctld and is the login node."""
    state = EngineCluster(
        cluster_id=cluster.id, fabric=pool_hosts.OWN_FABRIC, hostname_prefix=cluster.name, subnet=POOL_SUBNET,
        partition_key=None, public_ip=None, jumphost_ip=None, control_plane="absent", current_batch=1,
        membership_version=1, finished=False,
    )
    session.add(state)
    session.flush()
    _add_pool_nodes(session, catalog, cluster, state, cluster.node_count, now)
    set_cluster_status(cluster, str(NodeStatus.PENDING), None)
    set_phase(session, cluster, str(ClusterPhase.ADMITTED), now,
              f"{cluster.node_count} hosts of host pool {cluster.host_pool_id} held")


def _add_pool_nodes(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster, count: int,
                    now: dt.datetime) -> None:
    """`count` nodes as the state's current batch, each on a free host of the pool that fits (409 when
    too few do), under the lowest free indexes."""
    itype = catalog.instance_type(cluster.instance_type)
    if itype is None:
        raise ValueError(f"cluster {cluster.id}: spec not validated against the catalog")
    hosts = pool_hosts.take(session, cluster, itype, count, allocator.lock)
    used = {n.index for n in live_nodes(session, cluster.id)}
    free_indexes = (i for i in range(10**6) if i not in used)
    for host in hosts:
        index = next(free_indexes)
        node = new_node(session, cluster, name=f"{state.hostname_prefix}-{index}", index=index,
                        batch=state.current_batch, fabric=state.fabric, slot=host.position, scalable_unit=0,
                        gpu_count=itype.gpu_count, private_ip=pool_hosts.address_of(host), public_ip=None,
                        attempt=1, now=now)
        session.flush()
        pool_hosts.hold(host, node)


def _add_jumphost_ip(session: Session, cluster: Cluster, subnet: str, now: dt.datetime) -> str:
    address = allocator.next_private_ip(session, subnet, addressing.JUMPHOST_OFFSET)
    allocator.add(session, kind=allocator.PRIVATE_IP, pool=subnet, value=address, cluster_id=cluster.id,
                  node_id=None, now=now)
    return address


def _add_node(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster, *, index: int,
              slot: int, batch: int, attempt: int, public_ip: str | None, now: dt.datetime,
              takes_over: EngineNode | None = None, capacity_type: str = spot.ON_DEMAND) -> EngineNode:
    """A new node on `slot` (the caller holds the slot: `_hold_slots`); `takes_over`: a failed node whose
    private IP it inherits (an in-place repair keeps hostname and address, so the orchestrator and
    /etc/hosts need no change)."""
    fabric = catalog.fabric(cluster.region, state.fabric)
    itype = catalog.instance_type(cluster.instance_type)
    assert fabric is not None and itype is not None
    private_ip = (takes_over.private_ip if takes_over is not None
                  else allocator.next_private_ip(session, state.subnet, addressing.FIRST_WORKER_OFFSET))
    node = new_node(session, cluster, name=f"{state.hostname_prefix}-{index}", index=index, batch=batch,
                    fabric=fabric.name, slot=slot,
                    scalable_unit=slot_position(fabric, itype.name, slot).scalable_unit,
                    gpu_count=itype.gpu_count, private_ip=private_ip, public_ip=public_ip, attempt=attempt,
                    now=now, capacity_type=capacity_type)
    session.flush()
    if takes_over is not None:
        node.repair_of = takes_over.id
        allocator.hand_over(session, allocator.PRIVATE_IP, from_node=takes_over.id, to_node=node.id)
    else:
        allocator.add(session, kind=allocator.PRIVATE_IP, pool=state.subnet, value=private_ip,
                      cluster_id=cluster.id, node_id=node.id, now=now)
    return node


def _hold_slots(session: Session, cluster: Cluster, state: EngineCluster, nodes: list[EngineNode],
                now: dt.datetime) -> None:
    """The slot allocation rows of new nodes, counted at once (one counter update per SU, not per node)."""
    pool = allocator.pool_name(cluster.region, state.fabric, cluster.instance_type)
    allocator.add_slots(session, pool=pool, slots=[(node.slot, node.id) for node in nodes],
                        cluster_id=cluster.id, now=now)


def add_replacement(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster,
                    failed: EngineNode, now: dt.datetime) -> EngineNode | None:
    """A new node for a failed one (same name and index, next attempt), or None if the pool is empty (or
    the cluster is on a host pool: a server cannot be replaced)."""
    if cluster.host_pool_id is not None:
        return None
    units = {n.scalable_unit for n in live_nodes(session, cluster.id) if n.active_name is not None}
    fabric = catalog.fabric(cluster.region, state.fabric)
    assert fabric is not None
    first = fabric.first_su_of(cluster.instance_type)
    placed = allocator.place(session, catalog, now=now, region=cluster.region,
                             instance_type=cluster.instance_type, interconnect=cluster.interconnect,
                             count=1, fabric_name=state.fabric,
                             preferred_units=[u - first for u in units],
                             reservation_id=cluster.reservation_id)
    kinds, tickets = _capacity_kinds(session, catalog, cluster, state.fabric,
                                     spot_wanted=int(failed.capacity_type == spot.SPOT), on_demand_wanted=1)
    if placed is None or not kinds:
        return None
    node = _add_node(session, catalog, cluster, state, index=failed.index, slot=placed[1][0],
                     batch=failed.batch, attempt=failed.attempt + 1, public_ip=failed.public_ip, now=now,
                     capacity_type=kinds[0])
    _hold_slots(session, cluster, state, [node], now)
    spot.hold_tickets(session, cluster, state.fabric, tickets, [node], now)
    return node


def add_repair(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster,
               failed: EngineNode, now: dt.datetime) -> EngineNode | None:
    """Day 2: a new machine for a node that failed while running, under the same hostname, index and
    private IP, in the failed node's scalable unit (so on the same leaves) where it has a free node,
    else next to the cluster; None if the pool is empty. The caller has cleared `failed.active_name`."""
    if cluster.host_pool_id is not None:
        return None
    fabric = catalog.fabric(cluster.region, state.fabric)
    assert fabric is not None
    first = fabric.first_su_of(cluster.instance_type)

    def place(units: list[int]) -> tuple[Fabric, list[int]] | None:
        return allocator.place(session, catalog, now=now, region=cluster.region,
                               instance_type=cluster.instance_type, interconnect=cluster.interconnect,
                               count=1, fabric_name=state.fabric,
                               preferred_units=[u - first for u in units],
                               reservation_id=cluster.reservation_id)

    placed = place([failed.scalable_unit])
    if placed is not None and placed[1][0] // fabric.nodes_per_su != failed.scalable_unit - first:
        placed = place([n.scalable_unit for n in live_nodes(session, cluster.id) if n.active_name])
    kinds, tickets = _capacity_kinds(session, catalog, cluster, state.fabric,
                                     spot_wanted=int(failed.capacity_type == spot.SPOT), on_demand_wanted=1)
    if placed is None or not kinds:
        return None
    node = _add_node(session, catalog, cluster, state, index=failed.index, slot=placed[1][0],
                     batch=failed.batch, attempt=failed.attempt + 1, public_ip=failed.public_ip, now=now,
                     takes_over=failed, capacity_type=kinds[0])
    _hold_slots(session, cluster, state, [node], now)
    spot.hold_tickets(session, cluster, state.fabric, tickets, [node], now)
    return node


def _scale_up(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster,
              members: list[EngineNode], count: int, now: dt.datetime) -> None:
    """`count` more nodes as one batch; a spot cluster takes spot nodes as far as spot lasts (with
    fallback, on-demand nodes for the rest; without, the rest waits for spot to return)."""
    if cluster.host_pool_id is not None:
        state.current_batch += 1
        _add_pool_nodes(session, catalog, cluster, state, count, now)
        return
    added = add_batch(session, catalog, cluster, state, members, spot_wanted=count, on_demand_wanted=count,
                      now=now)
    if added is None:
        raise _no_capacity(session, catalog, cluster, count, now, fabric_name=state.fabric)


def add_batch(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster,
              members: list[EngineNode], *, spot_wanted: int, on_demand_wanted: int, now: dt.datetime
              ) -> list[EngineNode] | None:
    """New nodes as one batch on the cluster's fabric, next to `members`: for an on-demand cluster
    `on_demand_wanted` of them; for a spot cluster up to `spot_wanted` spot nodes, and with fallback
    on-demand nodes for what spot could not cover (up to `on_demand_wanted` in all). None when the
    fabric has no physical room; [] when there is nothing to add (spot short, no fallback)."""
    fabric = catalog.fabric(cluster.region, state.fabric)
    assert fabric is not None
    kinds, tickets = _capacity_kinds(session, catalog, cluster, fabric.name, spot_wanted=spot_wanted,
                                     on_demand_wanted=on_demand_wanted)
    if not kinds:
        return []
    first = fabric.first_su_of(cluster.instance_type)
    _draw(session, cluster, len(kinds), now)
    placed = allocator.place(session, catalog, now=now, region=cluster.region,
                             instance_type=cluster.instance_type, interconnect=cluster.interconnect,
                             count=len(kinds), fabric_name=state.fabric,
                             preferred_units=[n.scalable_unit - first for n in members],
                             reservation_id=cluster.reservation_id)
    if placed is None:
        return None
    if state.jumphost_ip is None and cluster.node_count > 1:  # a single node grows into a cluster
        state.jumphost_ip = _add_jumphost_ip(session, cluster, state.subnet, now)
    state.current_batch += 1
    used = {n.index for n in live_nodes(session, cluster.id)}
    if spot.uses_spot(cluster):
        # Fresh names for a spot cluster: the market's seeded draws are per node name, so a node
        # re-acquired under a reclaimed node's name would be reclaimed again.
        used |= set(session.scalars(select(EngineNode.index).where(EngineNode.cluster_id == cluster.id)))
    free_indexes = (i for i in range(10**6) if i not in used)
    nodes = [_add_node(session, catalog, cluster, state, index=next(free_indexes), slot=slot,
                       batch=state.current_batch, attempt=1, public_ip=None, now=now, capacity_type=kind)
             for slot, kind in zip(placed[1], kinds, strict=True)]
    _hold_slots(session, cluster, state, nodes, now)
    spot.hold_tickets(session, cluster, fabric.name, tickets, nodes, now)
    return nodes


def _capacity_kinds(session: Session, catalog: Catalog, cluster: Cluster, fabric: str, *, spot_wanted: int,
                    on_demand_wanted: int) -> tuple[list[str], list[int]]:
    """The capacity of each node to add (spot ones first) and the spot tickets taken for them."""
    if not spot.uses_spot(cluster):
        return [spot.ON_DEMAND] * on_demand_wanted, []
    tickets = spot.take_tickets(session, catalog, cluster, fabric, spot_wanted)
    fallback = max(0, on_demand_wanted - len(tickets)) if cluster.capacity_type == spot.FALLBACK else 0
    return [spot.SPOT] * len(tickets) + [spot.ON_DEMAND] * fallback, tickets


def _spot_short(session: Session, catalog: Catalog, cluster: Cluster, fabric: str,
                requested: int) -> InsufficientCapacity:
    free = spot.free_tickets(session, catalog, cluster, fabric)
    share = catalog.spot_capacity(cluster.region, fabric, cluster.instance_type)
    return InsufficientCapacity(
        f"{requested} x {cluster.instance_type} spot nodes requested on {fabric}, {free} of its {share} spot "
        "nodes free now; use capacity_type = spot_with_fallback (on-demand nodes stand in while spot is "
        "short) or on_demand", field="capacity_type",
        extra={"requested_nodes": requested, "available": [{
            "region": cluster.region, "fabric": fabric, "instance_type": cluster.instance_type,
            "available_nodes": free, "capacity_type": spot.SPOT}]})


def _draw(session: Session, cluster: Cluster, count: int, now: dt.datetime) -> str | None:
    """For a cluster drawing from a capacity reservation: check under the pool's lock that the
    reservation is in its term and has `count` nodes no cluster draws (409 naming the field otherwise),
    and return its fabric. None for other clusters."""
    if cluster.reservation_id is None:
        return None
    reservation = session.get(CapacityReservation, cluster.reservation_id)
    if reservation is None or reservation.project_id != cluster.project_id or reservation.deleted_at:
        raise Conflict(f"capacity reservation {cluster.reservation_id} does not exist",
                       field="reservation_id", code="reservation_not_found")
    allocator.lock(session, "pool:" + reservation.pool)
    starts, ends = reservation.starts_at, reservation.ends_at
    assert starts is not None and ends is not None
    if not starts <= now < ends:
        raise Conflict(f"capacity reservation {reservation.id} runs from {starts:%Y-%m-%dT%H:%M:%SZ} to "
                       f"{ends:%Y-%m-%dT%H:%M:%SZ}; clusters draw from it only in its term",
                       field="reservation_id", code="reservation_not_in_term")
    free = reservations.free_nodes(session, reservation)
    if count > free:
        raise Conflict(f"capacity reservation {reservation.id} has {free} of {reservation.node_count} "
                       f"nodes free; {count} requested (release nodes of its other clusters, or book more)",
                       field="node_count", code="reservation_exhausted",
                       extra={"reservation_free_nodes": free, "requested_nodes": count})
    return reservation.pool.split("/")[1]


def _remove_named(cluster: Cluster, members: list[EngineNode], names: list[str], node_count: int,
                  now: dt.datetime) -> None:
    """Mark the named members as leaving (the reconcile pass drains a busy one and waits for its jobs)."""
    by_name = {n.name: n for n in members}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise validation_failed([FieldError("remove_node_names", "unknown_node",
                                            f"not nodes of this cluster: {', '.join(unknown)}")])
    kept = scale_down.controller(cluster, members)
    if kept is not None and kept.name in names:
        raise validation_failed([FieldError(
            "remove_node_names", "controller_node",
            f"{kept.name} runs slurmctld and is the login node of this cluster on a host pool: remove "
            "other nodes, or destroy the cluster")])
    if len(members) - len(set(names)) != node_count:
        raise validation_failed([FieldError(
            "node_count", "inconsistent_with_removed_nodes",
            f"removing {len(set(names))} of {len(members)} nodes leaves {len(members) - len(set(names))}, "
            f"not node_count = {node_count}")])
    for name in sorted(set(names)):
        scale_down.mark(by_name[name], cluster, now, "remove_node_names")


def _no_capacity(session: Session, catalog: Catalog, cluster: Cluster, requested: int, now: dt.datetime,
                 fabric_name: str | None = None) -> InsufficientCapacity:
    free = allocator.free_by_fabric(session, catalog, cluster.region, cluster.instance_type,
                                    cluster.interconnect, cluster.reservation_id, now=now)
    if fabric_name is not None:
        free = {k: v for k, v in free.items() if k == fabric_name}
    most = max(free.values(), default=0)
    where = ", ".join(f"{name}: {count}" for name, count in free.items()) or "no such fabric"
    detail = (f"{requested} x {cluster.instance_type} requested on one {cluster.interconnect} fabric in "
              f"{cluster.region}, at most {most} available now ({where})")
    return InsufficientCapacity(detail, field="node_count", extra={
        "requested_nodes": requested,
        "available": [{"region": cluster.region, "fabric": name, "instance_type": cluster.instance_type,
                       "available_nodes": count} for name, count in free.items()],
    })
