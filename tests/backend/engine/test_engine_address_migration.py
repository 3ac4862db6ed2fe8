"""Migration 0004 (address plan) on a store that the old plan left with the same subnet and public IP in
two regions: live clusters keep their addresses, nothing collides, and the store keeps working
(SQLite and PostgreSQL)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, load_only, sessionmaker

from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine
from backend.store.engine_models import Allocation, EngineCluster, EngineNode
from backend.store.migrate import alembic_config
from backend.store.models import Cluster
from tests.backend.conftest import make_tenant
from tests.backend.engine.conftest import create, drain, get

PREVIOUS_HEAD = "0003_billing"
SHARED_SUBNET, SHARED_PUBLIC_IP = "10.0.0.0/22", "198.18.0.1"


def migrate(settings: Settings, revision: str, *, down: bool = False) -> None:
    engine = make_engine(settings)
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def readdress_as_old_plan(session: Session, cluster_id: str, private_ips: list[str]) -> None:
    """Give a cluster the addresses the old plan handed out: the first /22 and first public IP of the
    one block every region shared, with pools named by region (`private_ips`: jumphost first)."""
    # Only the columns revision 0003 has (later revisions add cluster and node columns).
    state = session.get(EngineCluster, cluster_id, options=[load_only(
        EngineCluster.cluster_id, EngineCluster.jumphost_ip, EngineCluster.subnet, EngineCluster.public_ip)])
    assert state is not None
    columns = load_only(EngineNode.id, EngineNode.index, EngineNode.private_ip, EngineNode.public_ip)
    query = select(EngineNode).options(columns).where(EngineNode.cluster_id == cluster_id)
    nodes = sorted(session.scalars(query), key=lambda n: n.index)
    ips = iter(private_ips)
    by_owner = {}
    if state.jumphost_ip is not None:
        state.jumphost_ip = by_owner[None] = next(ips)
    for node in nodes:
        node.private_ip = by_owner[node.id] = next(ips)
        node.public_ip = SHARED_PUBLIC_IP if node.public_ip else None
    state.subnet, state.public_ip = SHARED_SUBNET, SHARED_PUBLIC_IP
    for row in session.scalars(select(Allocation).where(Allocation.cluster_id == cluster_id)):
        if row.kind == "subnet":
            row.value = SHARED_SUBNET
        elif row.kind == "public_ip":
            row.value = SHARED_PUBLIC_IP
        elif row.kind == "private_ip":
            row.pool, row.value = SHARED_SUBNET, by_owner[row.node_id]


def address_rows(sessions: sessionmaker[Session]) -> dict[tuple[str, str], str]:
    """(cluster id, kind) -> pool of its subnet and public IP rows."""
    with sessions() as session:
        rows = session.scalars(select(Allocation).where(Allocation.kind.in_(("subnet", "public_ip"))))
        return {(a.cluster_id, a.kind): a.pool for a in rows}


def test_engine_address_migration_keeps_old_addresses_and_hands_out_no_address_twice(
    admin: TestClient, settings: Settings, sessions: sessionmaker[Session],
    make_worker: Callable[..., EngineWorker],
) -> None:
    other_key = make_tenant(settings, "other").admin_key
    other = TestClient(admin.app, headers={"Authorization": f"Bearer {other_key}"},
                       raise_server_exceptions=False)
    west = create(admin, name="c", region="us-west-2", instance_type="8xB200", node_count=2)
    north = create(other, name="solo", region="eu-north-1", instance_type="8xH200", node_count=1,
                   orchestrator="kubernetes")
    worker = make_worker()
    drain(worker)

    # The store as the previous head left it after these two creates.
    migrate(settings, PREVIOUS_HEAD, down=True)
    with sessions.begin() as session:
        readdress_as_old_plan(session, west["id"], ["10.0.0.4", "10.0.0.10", "10.0.0.11"])
        readdress_as_old_plan(session, north["id"], ["10.0.0.12"])
    assert set(address_rows(sessions).values()) == {"us-west-2", "eu-north-1"}

    migrate(settings, "head")
    # The first holder moves to the global pool; the second keeps the address in its region's pool.
    assert address_rows(sessions) == {
        (west["id"], "subnet"): "global", (west["id"], "public_ip"): "global",
        (north["id"], "subnet"): "eu-north-1", (north["id"], "public_ip"): "eu-north-1",
    }
    for client, cluster in ((admin, west), (other, north)):
        body = get(client, cluster["id"])
        assert (body["fabric"]["subnet"], body["login"]["public_ip"]) == (SHARED_SUBNET, SHARED_PUBLIC_IP)

    # The store keeps working: the create, a create where the old block lies, both scale-ups.
    new = [create(admin, name="c", region=region, instance_type=itype, node_count=2)
           for region, itype in (("eu-north-1", "8xH200"), ("us-east-1", "8xH100"))]
    assert admin.patch(f"/v1/clusters/{west['id']}", json={"node_count": 3}).status_code == 200
    assert other.patch(f"/v1/clusters/{north['id']}", json={"node_count": 2}).status_code == 200
    drain(worker)
    with sessions() as session:
        assert {c.status for c in session.scalars(select(Cluster))} == {"RUNNING"}
        nodes = session.scalars(select(EngineNode).where(EngineNode.status == "RUNNING")).all()
        states = session.scalars(select(EngineCluster)).all()
        north_state = session.get(EngineCluster, north["id"])
        assert north_state is not None and north_state.jumphost_ip == "10.0.0.5"  # .4 is west's jumphost
    private = [n.private_ip for n in nodes] + [s.jumphost_ip for s in states if s.jumphost_ip]
    assert len(private) == 4 + 3 + 2 * 3 and len(set(private)) == len(private)
    public = Counter(s.public_ip for s in states)
    assert public.pop(SHARED_PUBLIC_IP) == 2 and set(public.values()) == {1}
    assert all(c["fabric"]["subnet"] != SHARED_SUBNET for c in new)

    migrate(settings, PREVIOUS_HEAD, down=True)
    with sessions() as session:
        regions = {c.id: c.region for c in session.execute(select(Cluster.id, Cluster.region))}
    kinds = ("subnet", "public_ip")
    assert address_rows(sessions) == {(c, kind): region for c, region in regions.items() for kind in kinds}
    migrate(settings, "head")
