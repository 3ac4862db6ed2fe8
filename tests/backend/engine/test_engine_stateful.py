"""Hypothesis stateful test of the engine: creates, scales, volume changes, deletes, hardware faults on
running nodes (repaired in place or left failed), node actions, worker passes and crashes (passes
rolled back mid-way, abandoned leases, stale workers), with the invariants checked after every step:
capacity conserved (and counted right), no node in two clusters, partition keys unique, no leaked IPs."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select

from backend.domain import catalog as catalog_module
from backend.domain.catalog import catalog_from_dict, catalog_to_dict
from backend.domain.clock import SYSTEM_CLOCK, ManualClock
from backend.domain.errors import Conflict, NotFound
from backend.provisioning import capacity
from backend.provisioning.engine import pause_cluster, request_reconcile, resume_cluster
from backend.provisioning.node_actions import NodeAction, request_node_action
from backend.provisioning.reconciler import PassContext, reconcile_cluster
from backend.provisioning.settings import EngineSettings
from backend.provisioning.state import wake
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Allocation, EngineCluster, EngineNode, SimulatedOperation, WorkItem
from backend.store.models import Cluster, ClusterVolume, Project, Volume

POOLS = {"8xH100": 6, "8xH200": 3}
FAULTY = {
    "simulation_speed": 1e9,
    "simulation_boot_failure_rate": 0.25,
    "simulation_acceptance_failure_rate": 0.1,
    "engine_lease_seconds": 5.0,
}


def small_catalog() -> catalog_module.Catalog:
    doc = catalog_to_dict(catalog_module._builtin_catalog())
    for fabric in doc["fabrics"]:
        if fabric["name"] == "ib-east-a":
            fabric["pools"] = POOLS
    return catalog_from_dict(doc)


class EngineMachine(RuleBasedStateMachine):
    template: Path

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="engine-stateful-"))
        path = self.dir / "db.sqlite"
        shutil.copyfile(self.template, path)
        self.engine = make_engine(Settings(database_url=f"sqlite:///{path}"))
        self.sessions = make_session_factory(self.engine, write=True)
        self.catalog = small_catalog()
        self.clock = ManualClock(SYSTEM_CLOCK.now())  # every worker and every request reads this one
        self.worker = EngineWorker(
            self.sessions, EngineSettings(**FAULTY), catalog=self.catalog, worker_id="main", clock=self.clock
        )
        self.seq = 0
        with self.sessions.begin() as session:
            session.add(Project(id="prj_stateful", name="stateful", created_at=self.clock.now()))
            session.add(
                Volume(
                    id="vol_stateful",
                    project_id="prj_stateful",
                    name="v",
                    region="us-east-1",
                    size_tib=1,
                    generation=1,
                    created_at=self.clock.now(),
                    updated_at=self.clock.now(),
                )
            )
        self.clusters: list[str] = []

    def teardown(self) -> None:
        try:
            with self.sessions.begin() as session:
                for cluster in session.scalars(select(Cluster)):
                    if cluster.deletion_requested_at is None:
                        cluster.deletion_requested_at = self.clock.now()
                        request_reconcile(session, cluster.id, catalog=self.catalog, now=self.clock.now())
            self._drain()
            self.check_allocations()
            with self.sessions() as session:
                assert session.scalars(select(Allocation)).all() == []
        finally:
            self.engine.dispose()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _drain(self) -> None:
        for _ in range(200):
            if self.worker.run_once().claimed == 0:
                due = self.worker.next_due_at()
                # A repair waiting for a free node retries in 30 s: a timer, not work to drain.
                if due is None or due > self.clock.now() + dt.timedelta(seconds=5):
                    return
                self.clock.set(max(due, self.clock.now()) + dt.timedelta(microseconds=1))
        raise AssertionError("engine did not converge")

    def _free(self, itype: str) -> int:
        with self.sessions() as session:
            held = session.scalars(
                select(Allocation).where(
                    Allocation.kind == "slot", Allocation.pool == f"us-east-1/ib-east-a/{itype}"
                )
            )
            return POOLS[itype] - len(held.all())

    @rule(node_count=st.integers(1, 4), itype=st.sampled_from(sorted(POOLS)))
    def create(self, node_count: int, itype: str) -> None:
        self.seq += 1
        free = self._free(itype)
        try:
            with self.sessions.begin() as session:
                cluster = Cluster(
                    id=f"cls_{self.seq:026d}",
                    project_id="prj_stateful",
                    name=f"c{self.seq}",
                    region="us-east-1",
                    instance_type=itype,
                    node_count=node_count,
                    orchestrator="slurm",
                    interconnect="infiniband",
                    billing_type="on_demand",
                    labels={},
                    deletion_protection=False,
                    status="PENDING",
                    generation=1,
                    created_at=self.clock.now(),
                    updated_at=self.clock.now(),
                )
                session.add(cluster)
                session.flush()
                request_reconcile(session, cluster.id, catalog=self.catalog, now=self.clock.now())
        except Conflict as exc:
            assert exc.code == "insufficient_capacity" and free < node_count
            event("create refused: no capacity")
            with self.sessions() as session:
                assert session.get(Cluster, f"cls_{self.seq:026d}") is None  # nothing half-built
            return
        assert free >= node_count
        event("create admitted")
        self.clusters.append(f"cls_{self.seq:026d}")

    def _live(self) -> list[str]:
        with self.sessions() as session:
            return [
                c
                for c in self.clusters
                if (row := session.get(Cluster, c)) is not None and row.deletion_requested_at is None
            ]

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data(), node_count=st.integers(1, 5))
    def scale(self, data: st.DataObject, node_count: int) -> None:
        live = self._live()
        if not live:
            return
        cluster_id = data.draw(st.sampled_from(live))
        try:
            with self.sessions.begin() as session:
                cluster = session.get(Cluster, cluster_id)
                assert cluster is not None
                cluster.node_count = node_count
                cluster.generation += 1
                request_reconcile(session, cluster_id, catalog=self.catalog, now=self.clock.now())
        except Conflict as exc:
            assert exc.code == "insufficient_capacity"

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data())
    def toggle_volume(self, data: st.DataObject) -> None:
        live = self._live()
        if not live:
            return
        cluster_id = data.draw(st.sampled_from(live))
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            if cluster.volume_links:
                cluster.volume_links = []
            else:
                cluster.volume_links = [ClusterVolume(volume_id="vol_stateful", position=0)]
            request_reconcile(session, cluster_id, catalog=self.catalog, now=self.clock.now())

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        live = self._live()
        if not live:
            return
        cluster_id = data.draw(st.sampled_from(live))
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            cluster.deletion_requested_at = self.clock.now()
            request_reconcile(session, cluster_id, catalog=self.catalog, now=self.clock.now())

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data())
    def toggle_pause(self, data: st.DataObject) -> None:
        """Billing pauses (credits exhausted) or resumes a cluster: its nodes power off or on."""
        live = self._live()
        if not live:
            return
        cluster_id = data.draw(st.sampled_from(live))
        with self.sessions.begin() as session:
            state = session.get(EngineCluster, cluster_id)
            if state is not None and state.paused_reason is not None:
                resume_cluster(session, cluster_id, "credits added", now=self.clock.now())
            else:
                pause_cluster(session, cluster_id, "credits exhausted", now=self.clock.now())

    def _running_member(self, data: st.DataObject) -> EngineNode | None:
        with self.sessions() as session:
            running = session.scalars(select(EngineNode).where(
                EngineNode.active_name.is_not(None), EngineNode.stage == "ready",
                EngineNode.watch_token.is_not(None)).order_by(EngineNode.id)).all()
        return data.draw(st.sampled_from(running)) if running else None

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data())
    def hardware_fault(self, data: st.DataObject) -> None:
        """An XID on a running node now (its health watch ends in a fault)."""
        node = self._running_member(data)
        if node is None:
            return
        with self.sessions.begin() as session:
            watch = session.get(SimulatedOperation, node.watch_token)
            row = session.get(EngineNode, node.id)
            assert watch is not None and row is not None
            watch.succeeded, watch.ready_at = False, self.clock.now()
            watch.reason = "XID 79: GPU 2 has fallen off the bus"
            row.watch_due_at = watch.ready_at
            wake(session, node.cluster_id, self.clock.now())

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data(), action=st.sampled_from(["restart", "replace", "drain", "resume"]))
    def node_action(self, data: st.DataObject, action: NodeAction) -> None:
        with self.sessions() as session:
            members = session.scalars(select(EngineNode).where(EngineNode.active_name.is_not(None))
                                      .order_by(EngineNode.id)).all()
        if not members:
            return
        node = data.draw(st.sampled_from(members))
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, node.cluster_id)
            assert cluster is not None
            try:
                request_node_action(session, self.catalog, cluster, node.name, action, now=self.clock.now())
            except (Conflict, NotFound):
                session.rollback()

    @precondition(lambda self: bool(self.clusters))
    @rule(data=st.data())
    def toggle_node_repair(self, data: st.DataObject) -> None:
        live = self._live()
        if not live:
            return
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, data.draw(st.sampled_from(live)))
            assert cluster is not None
            cluster.node_repair = "manual" if cluster.node_repair == "auto" else "auto"
            request_reconcile(session, cluster.id, catalog=self.catalog, now=self.clock.now())

    @rule(rounds=st.integers(1, 3))
    def work(self, rounds: int) -> None:
        for _ in range(rounds):
            self.worker.run_once()

    @rule()
    def crash_mid_pass(self) -> None:
        """A worker claims, runs a pass and dies before committing; its lease then runs out."""
        ghost = EngineWorker(
            self.sessions,
            EngineSettings(**{**FAULTY, "engine_lease_seconds": 0.01}),
            catalog=self.catalog,
            worker_id="ghost",
            clock=self.clock,
        )
        for cluster_id, token in ghost._claim()[:2]:
            with self.sessions() as session:
                ctx = PassContext(
                    session=session,
                    driver=ghost.driver,
                    catalog=self.catalog,
                    settings=ghost.settings,
                    now=self.clock.now(),
                    worker="ghost",
                    fencing_token=token,
                )
                reconcile_cluster(ctx, cluster_id)
                session.rollback()  # killed: nothing of the pass survives
        self.clock.advance(seconds=0.02)  # past the 10 ms lease

    @rule()
    def stale_worker_is_fenced(self) -> None:
        """A paused worker whose lease was taken over cannot commit its pass."""
        ghost = EngineWorker(
            self.sessions,
            EngineSettings(**{**FAULTY, "engine_lease_seconds": 0.01}),
            catalog=self.catalog,
            worker_id="stale",
            clock=self.clock,
        )
        claimed = ghost._claim()
        if not claimed:
            return
        self.clock.advance(seconds=0.02)  # past the 10 ms lease
        with self.sessions.begin() as session:
            for cluster_id, _ in claimed:
                item = session.get(WorkItem, cluster_id)
                assert item is not None
                item.due_at = self.clock.now() - dt.timedelta(seconds=1)
        self.worker.run_once()  # takes the expired leases over, bumping the fencing tokens
        from backend.provisioning.worker import PassResult

        result = PassResult()
        for cluster_id, token in claimed:
            ghost._process(cluster_id, token, result)
        assert result.committed == 0

    @rule()
    def drain(self) -> None:
        self._drain()
        with self.sessions() as session:
            for cluster in session.scalars(select(Cluster)):
                state = session.get(EngineCluster, cluster.id)
                if cluster.deletion_requested_at is not None:
                    assert cluster.status == "DESTROYED"
                elif state is not None and state.paused_reason is not None and not state.finished:
                    # Paused: nothing of it runs (metered) any more; its nodes keep their slots.
                    assert cluster.status == "PAUSED"
                    nodes = session.scalars(select(EngineNode).where(EngineNode.cluster_id == cluster.id))
                    assert "RUNNING" not in {n.status for n in nodes if n.active_name is not None}
                    event("drained cluster PAUSED")
                else:
                    assert cluster.status in ("RUNNING", "FAILED"), (cluster.status, cluster.phase)
                    members = session.scalars(select(EngineNode).where(
                        EngineNode.cluster_id == cluster.id, EngineNode.active_name.is_not(None))).all()
                    if cluster.status == "FAILED" and state is not None and state.rollback_reason is None:
                        # Node-level fault tolerance: FAILED only when every node is lost.
                        assert {n.status for n in members} == {"FAILED"}, [n.status for n in members]
                    if cluster.node_repair == "auto" and state is not None and state.rollback_reason is None:
                        # Auto repair leaves a node failed only when its daily budget is used up.
                        stuck = ("automatic repair stopped", "no replacement node free")
                        for member in members:
                            why = member.status_reason or ""
                            assert member.status != "FAILED" or any(s in why for s in stuck), why
                    event(f"drained cluster {cluster.status} {cluster.phase}")

    @invariant()
    def check_allocations(self) -> None:
        with self.sessions() as session:
            allocations = session.scalars(select(Allocation)).all()
            live_nodes = session.scalars(select(EngineNode).where(EngineNode.status != "DESTROYED")).all()
            states = {s.cluster_id: s for s in session.scalars(select(EngineCluster))}
        slots = [a for a in allocations if a.kind == "slot"]
        # Capacity conserved: held slots == live nodes, never above the pool.
        for itype, installed in POOLS.items():
            held = [a for a in slots if a.pool.endswith("/" + itype)]
            assert len(held) <= installed
            assert len(held) == len([n for n in live_nodes if n.instance_type == itype])
        # No node in two clusters: every live node owns its own slot.
        assert sorted(a.node_id or "" for a in slots) == sorted(n.id for n in live_nodes)
        assert len({(n.fabric, n.instance_type, n.slot) for n in live_nodes}) == len(live_nodes)
        members = Counter((n.cluster_id, n.active_name) for n in live_nodes if n.active_name is not None)
        assert all(count == 1 for count in members.values())
        # Partition keys: one per unfinished cluster, unique on the fabric.
        pkeys = [a for a in allocations if a.kind == "partition_key"]
        assert len({a.value for a in pkeys}) == len(pkeys)
        assert {a.cluster_id for a in pkeys} == {c for c, s in states.items() if not s.finished}
        # No leaked IPs: node IPs belong to live nodes, jumphost IPs to unfinished clusters.
        node_ips = {(a.pool, a.value) for a in allocations if a.kind == "private_ip" and a.node_id}
        assert node_ips == {(states[n.cluster_id].subnet, n.private_ip) for n in live_nodes}
        assert all(not states[a.cluster_id].finished for a in allocations)
        # The free-slot counters admission places by agree with the rows, whatever rolled back.
        with self.sessions() as session:
            assert capacity.mismatches(session) == []


def test_engine_stateful_invariants(sqlite_template: Path) -> None:
    EngineMachine.template = sqlite_template
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(
            max_examples=12, stateful_step_count=14, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


@pytest.fixture(autouse=True)
def _no_catalog_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLOUD_CATALOG_FILE", raising=False)
