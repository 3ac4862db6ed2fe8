"""A cluster's public (login) address: a floating one from the region's pool, or a reserved IP.

Swapping happens in the caller's transaction, under the region's address lock, so an address is held in
one place at a time: a floating address is an allocation row of the cluster, a reserved one a
`reserved_ips` row the cluster names. A cluster not admitted yet has no address to swap: admission
takes the reserved IP it names (engine._admit); a finished one has none left.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog
from backend.domain.errors import Conflict
from backend.provisioning import allocator
from backend.store.engine_models import Allocation, EngineCluster, EngineNode
from backend.store.models import Cluster, ReservedIp
from backend.store.reserved_ip_history import DETACHED, record_reserved_ip_event


def _placed(session: Session, cluster_id: str) -> EngineCluster | None:
    state = session.get(EngineCluster, cluster_id)
    return None if state is None or state.finished else state


def _readdress(session: Session, state: EngineCluster, address: str | None) -> None:
    """Point the cluster and the node that answered on its old address (a single node) at `address`."""
    old, state.public_ip = state.public_ip, address
    if old is not None:
        session.execute(update(EngineNode).where(EngineNode.cluster_id == state.cluster_id,
                                                 EngineNode.public_ip == old)
                        .values(public_ip=address).execution_options(synchronize_session="fetch"))


def _drop_floating(session: Session, cluster_id: str) -> None:
    session.execute(delete(Allocation).where(Allocation.cluster_id == cluster_id,
                                             Allocation.kind == allocator.PUBLIC_IP))


def take_reserved(session: Session, *, cluster_id: str, region: str, address: str) -> None:
    """The cluster's login node answers on reserved `address`; its floating address goes back to the
    pool."""
    state = _placed(session, cluster_id)
    if state is None:
        return
    allocator.lock_region_addresses(session, region)
    _drop_floating(session, cluster_id)
    _readdress(session, state, address)


def take_floating(session: Session, catalog: Catalog, *, cluster_id: str, region: str,
                  now: dt.datetime) -> None:
    """The cluster (which gave up its reserved IP) gets a fresh floating address from the region."""
    state = _placed(session, cluster_id)
    if state is None:
        return
    home = catalog.region(region)
    assert home is not None
    allocator.lock_region_addresses(session, region)
    address = allocator.next_public_ip(session, home.public_cidr)
    if address is None:
        raise Conflict(f"region {region} has run out of public addresses", field="reserved_ip_id",
                       code="insufficient_capacity")
    allocator.add(session, kind=allocator.PUBLIC_IP, pool=allocator.ADDRESS_POOL, value=address,
                  cluster_id=cluster_id, node_id=None, now=now)
    _readdress(session, state, address)


def give_up_floating(session: Session, *, cluster_id: str, region: str) -> str | None:
    """The cluster's floating address, no longer in its allocation rows (the caller reserves it, so it
    stays the cluster's); None when the cluster has no address (not admitted yet, or finished)."""
    state = _placed(session, cluster_id)
    if state is None or state.public_ip is None:
        return None
    allocator.lock_region_addresses(session, region)
    _drop_floating(session, cluster_id)
    return state.public_ip


def let_go_at_end(session: Session, cluster: Cluster, now: dt.datetime) -> None:
    """A cluster that has ended (torn down, rolled back) gives its reserved IP back to the project: it
    stays reserved, billed at the unattached rate from `now`."""
    if cluster.reserved_ip_id is None:
        return
    reserved = session.get(ReservedIp, cluster.reserved_ip_id)
    if reserved is not None:
        record_reserved_ip_event(session, reserved_ip=reserved, event=DETACHED, at=now, cluster_id=cluster.id)
    cluster.reserved_ip_id = None
