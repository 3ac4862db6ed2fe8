"""Admission that does not read the whole fleet (migration 0012): its work on top of a large fleet is
that on top of a small one, counted in rows read (PostgreSQL) and VM steps (SQLite); the free-slot
counters always agree with the allocation rows (creates, scale changes, deletes, a wrong count, a
catalog change, concurrent creates beside releases, an upgrade from the previous head with live
clusters), and partition keys, subnets and public IPs come from next-free pointers that wrap round to
released values (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete as delete_rows
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from backend.domain import catalog as catalog_module
from backend.domain.catalog import Catalog, catalog_from_dict, catalog_to_dict
from backend.domain.clock import SYSTEM_CLOCK, ManualClock
from backend.fabric.topology import choose_slots
from backend.provisioning import capacity
from backend.provisioning.engine import InsufficientCapacity, request_reconcile
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Allocation, AllocationCursor, EngineCluster, SlotPool, SlotUnit
from backend.store.migrate import upgrade_to_head
from backend.store.models import Cluster, Project
from benchmarks.admission_fleet import bench_catalog, populate
from tests.backend.engine.conftest import FAST, create, drain, install_catalog
from tests.backend.engine.test_engine_address_migration import migrate
from tests.backend.fresh_databases import empty_database

POOL = "us-east-1/ib-east-a/8xH100"
_ids = itertools.count()


def small_catalog(pool_size: int, *, private: str | None = None, public: str | None = None) -> Catalog:
    """The built-in catalog with `pool_size` 8xH100 on ib-east-a and, optionally, smaller address blocks."""
    doc = catalog_to_dict(catalog_module._builtin_catalog())
    for fabric in doc["fabrics"]:
        if fabric["name"] == "ib-east-a":
            fabric["pools"] = {"8xH100": pool_size}
            fabric["private_cidr"] = private or fabric["private_cidr"]
    for region in doc["regions"]:
        if region["name"] == "us-east-1":
            region["public_cidr"] = public or region["public_cidr"]
    return catalog_from_dict(doc)


def admit(sessions: sessionmaker[Session], catalog: Catalog, nodes: int = 2, session: Session | None = None
          ) -> str:
    """Create a cluster as the API does (row + admission in one transaction, or in `session`'s); its id."""
    if session is None:
        with sessions.begin() as own:
            return admit(sessions, catalog, nodes, own)
    now = dt.datetime.now(dt.UTC)
    cluster_id = f"cls_counters{next(_ids):018d}"
    if session.get(Project, "prj_counters") is None:
        session.add(Project(id="prj_counters", name="counters", created_at=now))
        session.flush()
    session.add(Cluster(id=cluster_id, project_id="prj_counters", name=f"c{cluster_id[-6:]}",
                        region="us-east-1", instance_type="8xH100", node_count=nodes,
                        orchestrator="slurm" if nodes > 1 else "none", interconnect="infiniband",
                        billing_type="on_demand", labels={}, deletion_protection=False, status="PENDING",
                        generation=1, created_at=now, updated_at=now))
    session.flush()
    request_reconcile(session, cluster_id, catalog=catalog)
    return cluster_id


def delete(sessions: sessionmaker[Session], cluster_id: str, catalog: Catalog) -> None:
    with sessions.begin() as session:
        cluster = session.get(Cluster, cluster_id)
        assert cluster is not None
        cluster.deletion_requested_at = dt.datetime.now(dt.UTC)
        request_reconcile(session, cluster_id, catalog=catalog)


def worker_for(sessions: sessionmaker[Session], catalog: Catalog) -> EngineWorker:
    fast: dict[str, Any] = dict(FAST)
    clock = ManualClock(SYSTEM_CLOCK.now())  # admissions stamp the wall clock, as the app does
    return EngineWorker(sessions, EngineSettings(**fast), catalog=catalog, clock=clock)


def counters_agree(sessions: sessionmaker[Session], free: int | None = None) -> None:
    with sessions() as session:
        assert capacity.mismatches(session) == []
        if free is not None:
            assert session.scalar(select(SlotPool.free).where(SlotPool.pool == POOL)) == free


def held(sessions: sessionmaker[Session], kind: str) -> list[str]:
    with sessions() as session:
        return list(session.scalars(select(Allocation.value).where(Allocation.kind == kind)))


@pytest.fixture
def forty_h100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Catalog:
    return install_catalog(monkeypatch, tmp_path, {"8xH100": 40})  # two SUs: 32 + 8


def test_allocation_counters_follow_creates_scales_and_deletes_and_fill_the_pool(
    forty_h100: Catalog, admin: TestClient, sessions: sessionmaker[Session],
    make_worker: Callable[..., EngineWorker],
) -> None:
    worker = make_worker()
    a, b = create(admin, name="a", node_count=3), create(admin, name="b")
    c = create(admin, name="c", node_count=1)
    counters_agree(sessions, free=40 - 6)
    drain(worker)
    assert admin.patch(f"/v1/clusters/{a['id']}", json={"node_count": 5}).status_code == 200
    assert admin.patch(f"/v1/clusters/{b['id']}", json={"node_count": 1}).status_code == 200
    assert admin.delete(f"/v1/clusters/{c['id']}").status_code in (200, 202, 204)
    counters_agree(sessions)
    drain(worker)
    counters_agree(sessions, free=40 - 6)
    # Everything released is placeable again: the rest of the pool in one create, then nothing.
    assert create(admin, name="d", node_count=34)["node_count"] == 34
    counters_agree(sessions, free=0)
    refused = admin.post("/v1/clusters", json={"name": "e", "region": "us-east-1", "instance_type": "8xH100",
                                              "node_count": 2})
    assert refused.status_code == 409 and refused.json()["code"] == "insufficient_capacity"
    assert refused.json()["available"][0]["available_nodes"] == 0
    slots = held(sessions, "slot")
    assert sorted(int(s) for s in slots) == list(range(40))


def test_allocation_counters_recount_a_wrong_count_and_a_changed_catalog(
    sessions: sessionmaker[Session],
) -> None:
    catalog = small_catalog(40)
    admit(sessions, catalog, nodes=3)
    admit(sessions, catalog, nodes=2)
    counters_agree(sessions, free=35)
    # Best fit put both in the small SU (slots 32..36): 27 + 3 free.
    assert sorted(int(s) for s in held(sessions, "slot")) == list(range(32, 37))
    with sessions.begin() as session:  # counters that lie: SU 1 says all 8 free, SU 0 says none
        session.execute(update(SlotUnit).where(SlotUnit.pool == POOL, SlotUnit.unit == 1).values(free=8))
        session.execute(update(SlotUnit).where(SlotUnit.pool == POOL, SlotUnit.unit == 0).values(free=0))
    admit(sessions, catalog, nodes=4)  # believed, best fit would be SU 1: checking its rows finds 3 free
    counters_agree(sessions, free=31)
    assert sorted(int(s) for s in held(sessions, "slot")) == [0, 1, 2, 3, *range(32, 37)]
    grown = small_catalog(70)  # a third SU installed
    admit(sessions, grown, nodes=30)
    counters_agree(sessions, free=70 - 39)
    with sessions() as session:
        assert session.get(SlotPool, POOL).capacity == 70  # type: ignore[union-attr]
        assert len(session.scalars(select(SlotUnit).where(SlotUnit.pool == POOL)).all()) == 3


def test_allocation_pointers_move_on_and_wrap_round_to_released_addresses(
    sessions: sessionmaker[Session],
) -> None:
    # Two /22s and two public addresses in all.
    catalog = small_catalog(40, private="10.0.0.0/21", public="198.18.0.0/30")
    worker = worker_for(sessions, catalog)
    first, second = admit(sessions, catalog), admit(sessions, catalog)
    with pytest.raises(InsufficientCapacity, match="run out of addresses"):
        admit(sessions, catalog)
    with sessions() as session:
        states = [session.get(EngineCluster, c) for c in (first, second)]
        assert [(s.subnet, s.public_ip, s.partition_key) for s in states if s] == [
            ("10.0.0.0/22", "198.18.0.1", "0x0001"), ("10.0.4.0/22", "198.18.0.2", "0x0002")]
    delete(sessions, first, catalog)
    drain(worker)
    third = admit(sessions, catalog)  # the pointers come round to what `first` released
    with sessions() as session:
        state = session.get(EngineCluster, third)
        assert state is not None
        # Partition keys have room ahead: the pointer moves on rather than reuse 0x0001 at once.
        assert (state.subnet, state.public_ip, state.partition_key) == ("10.0.0.0/22", "198.18.0.1", "0x0003")
        cursors = dict(session.execute(select(AllocationCursor.name, AllocationCursor.position)).all())
    assert cursors["subnet:10.0.0.0/21"] == 1 and cursors["public_ip:198.18.0.0/30"] == 2
    with pytest.raises(InsufficientCapacity, match="run out of addresses"):
        admit(sessions, catalog)
    counters_agree(sessions, free=36)


def test_allocation_concurrent_creates_beside_releases_never_overbook(
    sessions: sessionmaker[Session],
) -> None:
    catalog = small_catalog(12)
    worker = worker_for(sessions, catalog)
    old = [admit(sessions, catalog) for _ in range(4)]
    drain(worker)
    for cluster_id in old[:2]:
        delete(sessions, cluster_id, catalog)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def creator() -> None:
        for _ in range(2):
            try:
                admit(sessions, catalog)
                outcomes.append("created")
            except InsufficientCapacity:
                outcomes.append("refused")
            except BaseException as error:
                errors.append(error)

    def releaser() -> None:
        try:
            drain(worker)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=creator) for _ in range(5)] + [threading.Thread(target=releaser)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    drain(worker)
    slots = held(sessions, "slot")
    assert len(slots) == len(set(slots)) <= 12
    assert len(slots) == 2 * (2 + outcomes.count("created"))
    assert outcomes.count("created") >= 2  # at least the two clusters' room that was free all along
    for kind in ("partition_key", "subnet", "public_ip"):
        values = held(sessions, kind)
        assert len(values) == len(set(values)) == 2 + outcomes.count("created")
    counters_agree(sessions, free=12 - len(slots))


def test_allocation_counters_upgrade_from_the_previous_head_keeps_live_clusters(
    forty_h100: Catalog, admin: TestClient, settings: Settings, sessions: sessionmaker[Session],
    make_worker: Callable[..., EngineWorker],
) -> None:
    worker = make_worker()
    old = [create(admin, name="old1", node_count=3), create(admin, name="old2")]
    drain(worker)
    before = {kind: set(held(sessions, kind)) for kind in ("slot", "subnet", "public_ip", "partition_key")}
    migrate(settings, "0011_ttl_budgets", down=True)  # the previous head
    migrate(settings, "head")  # 0012 and any later revision: the API below runs the current code
    with sessions() as session:  # counters and pointers start empty, the rows are untouched
        assert session.scalars(select(SlotPool)).all() == []
        assert session.scalars(select(AllocationCursor)).all() == []
    assert {kind: set(held(sessions, kind)) for kind in before} == before
    migrate(settings, "head")  # later migrations (columns the app writes) on top
    new = create(admin, name="new", node_count=4)
    for kind, values in before.items():
        assert set(held(sessions, kind)) > values  # the new cluster took values nobody holds
    counters_agree(sessions, free=40 - 9)
    assert admin.delete(f"/v1/clusters/{old[0]['id']}").status_code in (200, 202, 204)
    drain(worker)
    counters_agree(sessions, free=40 - 6)
    assert admin.get(f"/v1/clusters/{new['id']}").json()["status"] == "RUNNING"




def _rows_read_by_one_admission(store: str, directory: Path, fleet: int) -> int:
    """Work one admission does on top of `fleet` bulk-inserted live clusters, in units that do not depend
    on the machine's speed: allocation rows and index entries read (PostgreSQL, this transaction's
    statistics), or hundreds of virtual machine steps (SQLite's progress handler)."""
    directory.mkdir()
    with empty_database(store, directory) as url:
        engine = make_engine(Settings(database_url=url))
        try:
            upgrade_to_head(engine)
            populate(engine, fleet)
            sessions = make_session_factory(engine, write=True)
            catalog = bench_catalog(fleet, extra=10)
            for _ in range(6):  # the pool's first count, the pointers past the fleet; prepared statements
                admit(sessions, catalog)
            with sessions.begin() as session:
                if store == "postgresql":
                    # As on a connection that has run the probes many times: generic plans. The view
                    # also holds earlier transactions' counts not yet flushed: take the difference.
                    session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
                    rows_read = text("SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) "
                                     "FROM pg_stat_xact_user_tables WHERE relname = 'engine_allocations'")
                    before = int(session.scalar(rows_read))
                    admit(sessions, catalog, session=session)
                    return int(session.scalar(rows_read)) - before
                steps = [0]
                raw = session.connection().connection.dbapi_connection
                assert raw is not None
                raw.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)
                admit(sessions, catalog, session=session)
                raw.set_progress_handler(None, 0)
                return steps[0]
        finally:
            engine.dispose()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_allocation_admission_reads_do_not_grow_with_the_fleet(store: str, tmp_path: Path) -> None:
    small = _rows_read_by_one_admission(store, tmp_path / "small", 50)
    large = _rows_read_by_one_admission(store, tmp_path / "large", 1500)
    assert large <= small * 1.2 + 10, (small, large)


def test_allocation_counters_choose_as_the_topology_rule_does(sessions: sessionmaker[Session]) -> None:
    """`capacity.choose` (on counters) picks the same slots as `topology.choose_slots` (the rule over
    every slot) for random pools, holdings, counts and preferred SUs."""
    catalog = small_catalog(100)  # SUs of 32, 32, 32 and 4
    fabric = catalog.fabric("us-east-1", "ib-east-a")
    assert fabric is not None
    cluster_id = admit(sessions, catalog, nodes=1)
    rng = random.Random(18)
    for case in range(25):
        taken = set(rng.sample(range(100), rng.randint(0, 95)))
        count = rng.randint(1, 12)
        preferred = rng.sample(range(-1, 5), rng.randint(0, 2))
        with sessions() as session:
            session.execute(delete_rows(Allocation).where(Allocation.kind == "slot"))
            session.add_all([Allocation(kind="slot", pool=POOL, value=str(s), cluster_id=cluster_id,
                                        node_id=None, created_at=dt.datetime.now(dt.UTC)) for s in taken])
            session.flush()
            counted = capacity.recount(session, POOL, 100, 32)
            chosen = capacity.choose(session, counted, count, preferred)
            session.rollback()
        expected = choose_slots(fabric, "8xH100", taken, count, preferred)
        assert chosen == expected, (case, sorted(taken), count, preferred)
