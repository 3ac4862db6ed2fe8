"""Reconciliation, as the outside money review did it by hand: a scripted day of one project on a
ManualClock (on-demand with a scale-up, a pause and resume and a relabel; spot with a failed node
repaired; a reserved term; a cluster drawing a capacity reservation; storage resized and deleted; a
reserved IP reserved, attached, detached and released), the metering job run every hour. Every usage
line is then recomputed here independently, from the catalog's rates and the node transitions the
script wrote (never from billing's code), with the team each line must carry: its object's team when
the line was charged. The lines must match one for one, and the sums per team must equal chargeback's
groups and each team budget's spend.

The node histories are written as the engine writes them (`engine_node_transitions`), so the run takes
no sleeps and no engine. A second scripted run does take the real engine worker, on a ManualClock the
app's cluster writes and the metering job share: a node repaired after a hardware fault, an autoscaler
scale-up on waiting jobs and scale-down when the queue empties, and a cluster deleted at its TTL. Its
lines are recomputed the same way, from the transitions the engine wrote.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import partial

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.service import run_metering
from backend.domain.catalog import default_catalog
from backend.domain.clock import SYSTEM_CLOCK, ManualClock, ensure_utc
from backend.provisioning.driver import Job, NodeRun, OperationRequest, OpKind
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode, NodeTransition
from backend.store.models import AuditEvent, Cluster
from tests.backend.billing.conftest import BillingWorld, at
from tests.backend.conftest import Tenant
from tests.backend.engine.conftest import FAST, drain

CATALOG = default_catalog()
SETTLE = timedelta(seconds=60)
HOUR = timedelta(hours=1)
NLP, VISION = {"team": "nlp"}, {"team": "vision"}
RUNS = [at(f"{hour:02d}:01:00") for hour in range(10, 18)]


def gpu_hour(instance_type: str) -> tuple[Decimal, int]:
    itype = CATALOG.instance_type(instance_type)
    assert itype is not None
    return itype.on_demand_usd_per_gpu_hour, itype.gpu_count


def micros(rate: Decimal, units: Decimal | int, seconds: int) -> int:
    """The review's rule: rate x units x seconds / 3600, half-up to a micro-dollar, once per line."""
    exact = rate * Decimal(units) * seconds / 3600 * 1_000_000
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def seconds(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds())


def clock_hours(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    cuts = []
    while start < end:
        boundary = start.replace(minute=0, second=0) + HOUR
        cuts.append((start, min(boundary, end)))
        start = min(boundary, end)
    return cuts


@dataclass(frozen=True)
class Line:
    kind: str
    resource: str  # node name, volume, address or reservation (as the script names it)
    start: datetime
    end: datetime
    amount_micros: int
    team: str | None


class Script:
    """What the script did, kept apart from the store: node transitions, labels over time, storage
    sizes, address states, and the moments the metering job ran."""

    def __init__(self, world: BillingWorld, project: str) -> None:
        self.world, self.project = world, project
        self.steps: list[tuple[datetime, int, Callable[[], None]]] = []
        self.node_history: dict[tuple[str, str], list[tuple[datetime, str]]] = defaultdict(list)
        self.labels: dict[str, list[tuple[datetime, dict[str, str]]]] = defaultdict(list)
        self.names: dict[str, str] = {}  # store id -> script name

    def at(self, moment: datetime, action: Callable[[], None]) -> None:
        self.steps.append((moment, len(self.steps), action))

    def node(self, cluster: str, name: str, status: str, moment: datetime,
             capacity: str = "on_demand") -> None:
        self.node_history[(cluster, name)].append((moment, status))
        self.at(moment, lambda: self.world.transition(cluster, name, status, moment, capacity))

    def relabel(self, cluster: str, labels: dict[str, str], moment: datetime) -> None:
        self.labels[cluster].append((moment, labels))
        self.at(moment, lambda: self.world.relabel(Cluster, cluster, labels))

    def play(self) -> None:
        for moment in RUNS:
            self.at(moment, partial(self._run, moment))
        for _moment, _order, action in sorted(self.steps, key=lambda step: (step[0], step[1])):
            action()

    def _run(self, moment: datetime) -> None:
        self.world.run(moment)

    def team_at(self, owner: str, moment: datetime) -> str | None:
        """The owner's team as the metering job saw it at `moment` (labels change between runs)."""
        team = None
        for changed, labels in self.labels[owner]:
            if changed <= moment:
                team = labels.get("team")
        return team


def charged_at(end: datetime) -> datetime:
    """The first pass that finds a slice ending at `end` final (ended at least the settle time ago)."""
    return next(run for run in RUNS if run - SETTLE >= end)


def node_lines(script: Script, cluster: str, *, rate: Decimal, gpus: int, kind: str) -> list[Line]:
    lines = []
    for (owner, node), history in script.node_history.items():
        if owner != cluster:
            continue
        opened = None
        for moment, status in history:
            if status == "RUNNING" and opened is None:
                opened = moment
            elif status != "RUNNING" and opened is not None:
                for start, end in clock_hours(opened, moment):
                    lines.append(Line(kind, node, start, end, micros(rate, gpus, seconds(start, end)),
                                      script.team_at(cluster, charged_at(end))))
                opened = None
        assert opened is None, "the script stops every node before the last run"
    return lines


def test_every_line_of_a_scripted_day_reconciles_with_chargeback_and_budgets(
    world: BillingWorld, tenant: Tenant, admin: TestClient, member: TestClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("backend.api.budgets._clock", world.clock)  # budgets count the script's month
    project = tenant.project_id
    script = Script(world, project)
    budgets = {
        team: admin.post("/v1/budgets", json={"name": team, "amount_usd": "100000",
                                              "label_filter": {"key": "team", "value": team}}).json()["id"]
        for team in ("nlp", "vision")
    }

    # On-demand `train` (nlp): scaled to two nodes, paused and resumed, relabelled vision, deleted.
    train = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1, labels=NLP)
    script.labels[train].append((at("00:00:00"), NLP))
    script.node(train, "train-0", "RUNNING", at("10:00:00"))
    script.at(at("10:30:00"), lambda: world.set_node_count(train, 2))
    script.node(train, "train-1", "RUNNING", at("10:42:30"))
    for node in ("train-0", "train-1"):
        script.node(train, node, "PAUSED", at("11:15:00"))
        script.node(train, node, "RUNNING", at("11:45:00"))
    script.relabel(train, VISION, at("12:30:00"))
    for node in ("train-0", "train-1"):
        script.node(train, node, "DESTROYING", at("13:20:15"))

    # Spot `batch` (nlp): its node fails at 11:17:30 and a replacement runs from 11:30 until 14:00.
    batch = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1, labels=NLP)
    script.labels[batch].append((at("00:00:00"), NLP))
    script.node(batch, "batch-0", "RUNNING", at("10:00:00"), "spot")
    script.node(batch, "batch-0", "FAILED", at("11:17:30"), "spot")
    script.node(batch, "batch-0b", "RUNNING", at("11:30:00"), "spot")
    script.node(batch, "batch-0b", "DESTROYING", at("14:00:00"), "spot")

    # Reserved `finetune` (vision): a 1-day term from its node's RUNNING at 10:05, charged up front.
    finetune = world.cluster(project, instance_type="8xH200", region="eu-north-1", node_count=1,
                             billing_type="reserved", duration_days=1, labels=VISION)
    script.labels[finetune].append((at("00:00:00"), VISION))
    script.node(finetune, "ft-0", "RUNNING", at("10:05:00"))
    script.node(finetune, "ft-0", "DESTROYING", at("14:05:00"))

    # `draw` (nlp) draws a capacity reservation of vision's, booked from 10:00 for a day.
    booking = world.capacity_reservation(project, instance_type="8xH100", region="us-east-1",
                                         node_count=1, duration_days=1, starts_at=at("10:00:00"),
                                         labels=VISION)
    draw = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1, labels=NLP,
                         reservation_id=booking)
    script.labels[draw].append((at("00:00:00"), NLP))
    script.node(draw, "draw-0", "RUNNING", at("10:10:00"))
    script.node(draw, "draw-0", "DESTROYING", at("13:10:00"))

    # Storage (nlp): 1 TiB from 10:00, 2 TiB from 11:30, deleted at 13:30.
    volume = world.volume(project, region="us-east-1", size_tib=1, created=at("10:00:00"), labels=NLP)
    script.at(at("11:30:00"), lambda: world.resize_volume(volume, 2, at("11:30:00")))
    script.at(at("13:30:00"), lambda: world.delete_volume(volume, at("13:30:00")))

    # A reserved IP (vision): reserved 10:00, attached to train 10:30-12:30, released 13:00.
    address = world.reserved_ip(project, region="us-east-1", moment=at("10:00:00"), labels=VISION)
    script.at(at("10:30:00"), lambda: world.reserved_ip_event(address, "attached", at("10:30:00"), train))
    script.at(at("12:30:00"), lambda: world.reserved_ip_event(address, "detached", at("12:30:00"), train))
    script.at(at("13:00:00"), lambda: world.reserved_ip_event(address, "released", at("13:00:00")))

    script.play()

    # --- the review's recomputation -------------------------------------------------------------------
    h100, h100_gpus = gpu_hour("8xH100")
    h200, h200_gpus = gpu_hour("8xH200")
    one_day = max(d for days, d in CATALOG.reserved_discounts.items() if days <= 1)
    expected = [
        *node_lines(script, train, rate=h100, gpus=h100_gpus, kind="compute_on_demand"),
        *node_lines(script, batch, rate=h100 * (1 - CATALOG.spot_discount), gpus=h100_gpus,
                    kind="compute_spot"),
        *node_lines(script, finetune, rate=Decimal(0), gpus=h200_gpus, kind="compute_reserved"),
        *node_lines(script, draw, rate=Decimal(0), gpus=h100_gpus, kind="compute_reserved"),
        Line("reservation", "finetune term", at("10:05:00"), at("10:05:00", day=3),
             micros(h200 * (1 - one_day), h200_gpus, 24 * 3600), "vision"),
        Line("reservation", "capacity reservation", at("10:00:00"), at("10:00:00", day=3),
             micros(h100 * (1 - one_day), h100_gpus, 24 * 3600), "vision"),
    ]
    tib_hour = CATALOG.storage_usd_per_tib_hour
    for size, start, end in ((1, at("10:00:00"), at("11:30:00")), (2, at("11:30:00"), at("13:30:00"))):
        expected += [Line("storage", "volume", s, e, micros(tib_hour, size, seconds(s, e)), "nlp")
                     for s, e in clock_hours(start, end)]
    for attached, start, end in ((False, at("10:00:00"), at("10:30:00")),
                                 (True, at("10:30:00"), at("12:30:00")),
                                 (False, at("12:30:00"), at("13:00:00"))):
        rate = CATALOG.reserved_ip_attached_usd_per_hour if attached else CATALOG.reserved_ip_usd_per_hour
        expected += [Line("reserved_ip", "address", s, e, micros(rate, 1, seconds(s, e)), "vision")
                     for s, e in clock_hours(start, end)]

    # --- the lines the meter wrote ----------------------------------------------------------------------
    names = {volume: "volume", address: "address", booking: "capacity reservation", finetune: "finetune term"}
    stored = []
    for row in world.records(project):
        resource = names.get(row.resource_id) or row.resource_id.rsplit("_", 1)[-1]
        stored.append(Line(row.kind, resource, ensure_utc(row.period_start), ensure_utc(row.period_end),
                           row.amount_micros, (row.labels or {}).get("team")))
    key = lambda line: (line.kind, line.resource, line.start)  # noqa: E731
    assert sorted(stored, key=key) == sorted(expected, key=key)
    # By hand: train 17,880 node-s x 31.92/h = 158.536; batch 13,650 s x 12.768/h = 48.412; the terms
    # 933.12 + 689.472; storage 5.5 TiB-h x 0.1122 = 0.6171; the address 0.005 + 0.005.
    assert len(stored) == 36 and sum(line.amount_micros for line in stored) == 1_830_167_100

    per_team: dict[str | None, int] = defaultdict(int)
    for line in expected:
        per_team[line.team] += line.amount_micros
    assert set(per_team) == {"nlp", "vision"}  # every line reached a team
    groups = member.get("/v1/billing/usage", params={"group_by": "label:team"}).json()
    assert {g["key"]: Decimal(g["amount_usd"]) for g in groups["groups"]} == {
        team: Decimal(amount) / 1_000_000 for team, amount in per_team.items()
    }
    for team, budget_id in budgets.items():
        spent = admin.get(f"/v1/budgets/{budget_id}").json()["spent_usd"]
        assert Decimal(spent) == Decimal(per_team[team]) / 1_000_000, team
    # The relabel moved no past spend: train's lines before it stay nlp's, those charged after are vision's.
    train_teams = {(line.start, line.team) for line in stored if line.resource.startswith("train")}
    assert ("nlp" in {t for _, t in train_teams}) and ("vision" in {t for _, t in train_teams})


# --- a second scripted run, under the real engine worker --------------------------------------------------
# The meter's documented rule (docs/billing.md, "Compute"): a node is metered from RUNNING until its
# destruction starts, it fails or it is paused; anything else in between keeps the meter going.
STOPS = {"DESTROYING", "DESTROYED", "FAILED", "PAUSING", "PAUSED", "STOPPING", "STOPPED"}


class FaultsAndQueues(SimulatedDatacenter):
    """The simulated datacenter with the Slurm queue of each cluster the script sets (the autoscaler
    reads it) and one scripted hardware fault: (cluster name, node name) -> how long after its first
    machine's health watch starts."""

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.queues: dict[str, list[Job]] = {}
        self.faults: dict[tuple[str, str], timedelta] = {}

    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: datetime,
                     *, cluster_id: str) -> list[Job]:
        return list(self.queues.get(cluster_name, []))

    def _outcome(self, request: OperationRequest, now: datetime) -> tuple[datetime | None, bool, str | None]:
        after = self.faults.get((request.cluster_name, request.node_name or ""))
        if request.kind == OpKind.HEALTH_WATCH and request.attempt == 1 and after is not None:
            return now + after, False, "XID 79: GPU has fallen off the bus on GPU 3"
        return super()._outcome(request, now)


def slurm_job(job_id: int, state: str, nodes: str = "") -> Job:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    return Job(job_id=job_id, name="sleep", user="alice", partition="gpu", nodes=nodes, gpus=8, state=state,
               submitted_at=moment, started_at=None if state == "PENDING" else moment, ended_at=None,
               time_limit=timedelta(hours=1), priority=1, reason="Resources" if state == "PENDING" else None)


def test_repair_autoscaling_and_ttl_under_the_engine_reconcile_with_chargeback_and_budgets(
    world: BillingWorld, tenant: Tenant, admin: TestClient, member: TestClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One manual clock for the app's cluster writes, the engine worker and the metering job, from a whole
    # hour ahead of the wall clock (the app's other writes stay in the engine's past).
    start = (SYSTEM_CLOCK.now() + 2 * HOUR).replace(minute=0, second=0, microsecond=0)
    if (start + 6 * HOUR).month != start.month:  # budgets count a calendar month: keep the run in one
        start = (start + 6 * HOUR).replace(hour=0)
    clock = ManualClock(start)
    for where in ("backend.provisioning.engine", "backend.services.clusters"):
        monkeypatch.setattr(f"{where}.utcnow", clock.now)
    monkeypatch.setattr("backend.api.budgets._clock", clock)
    project = tenant.project_id
    budgets = {
        team: admin.post("/v1/budgets", json={"name": team, "amount_usd": "100000",
                                              "label_filter": {"key": "team", "value": team}}).json()["id"]
        for team in ("nlp", "vision")
    }
    settings = EngineSettings(**FAST)  # type: ignore[arg-type]
    driver = FaultsAndQueues(settings)
    driver.faults[("train", "train-0")] = timedelta(minutes=40)  # repaired in place (node_repair auto)
    worker = EngineWorker(world.sessions, settings, driver=driver, clock=clock)

    def advance(to: datetime) -> None:
        """Move the clock to `to`, running the engine at every moment it is due on the way."""
        while True:
            due = worker.next_due_at()
            if due is None or due > to:
                break
            clock.set(max(due, clock.now()) + timedelta(microseconds=1))
            drain(worker, catch_up_with_wall=False)
        clock.set(max(to, clock.now()))
        drain(worker, catch_up_with_wall=False)

    def meter(moment: datetime) -> None:
        advance(moment)
        run_metering(sessions=world.sessions, clock=clock, settings=world.settings, prices=world.prices)

    def create(body: dict[str, object]) -> str:
        response = admin.post("/v1/clusters", json={"region": "us-east-1", "instance_type": "8xH100", **body})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    train = create({"name": "train", "node_count": 1, "labels": NLP})
    auto = create({"name": "auto", "labels": VISION,
                   "autoscaling": {"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 5}})
    short = create({"name": "short", "node_count": 1, "ttl": "1h", "labels": NLP})
    advance(start + timedelta(seconds=1))
    assert {admin.get(f"/v1/clusters/{c}").json()["status"] for c in (train, auto, short)} == {"RUNNING"}

    # 0:20 two jobs wait for nodes on `auto`: the autoscaler adds two.
    advance(start + timedelta(minutes=20))
    driver.queues["auto"] = [slurm_job(1, "RUNNING", "auto-0"), slurm_job(2, "PENDING"),
                             slurm_job(3, "PENDING")]
    assert worker.autoscale() == 1
    advance(start + timedelta(minutes=21))
    assert admin.get(f"/v1/clusters/{auto}").json()["node_count"] == 3
    meter(start + timedelta(hours=1, minutes=1))  # train-0 failed at 0:40 and was replaced; `short` expired
    assert admin.get(f"/v1/clusters/{short}").status_code == 404
    body = admin.get(f"/v1/clusters/{train}").json()
    assert (body["status"], body["phase"]) == ("RUNNING", "Ready")
    # 1:30 the queue empties: after the idle time the autoscaler goes back to one node.
    advance(start + timedelta(hours=1, minutes=30))
    driver.queues["auto"] = []
    for _ in range(3):
        worker.autoscale()
        advance(clock.now() + timedelta(minutes=6))
    assert admin.get(f"/v1/clusters/{auto}").json()["node_count"] == 1
    meter(start + timedelta(hours=2, minutes=1))
    advance(start + timedelta(hours=2, minutes=10))
    for cluster in (train, auto):
        assert admin.delete(f"/v1/clusters/{cluster}").status_code in (200, 202, 204)
    advance(start + timedelta(hours=2, minutes=11))
    meter(start + timedelta(hours=3, minutes=1))
    meter(start + timedelta(hours=4, minutes=1))

    # --- the recomputation, from the node transitions the engine wrote and the catalog ---------------------
    rate, gpus = gpu_hour("8xH100")
    teams = {train: "nlp", auto: "vision", short: "nlp"}
    with world.sessions() as session:
        history = session.scalars(select(NodeTransition).where(NodeTransition.project_id == project)
                                  .order_by(NodeTransition.at, NodeTransition.id)).all()
        audit = [e.details for e in session.scalars(select(AuditEvent).where(
            AuditEvent.resource_id == auto, AuditEvent.action == "cluster.autoscaled"))]
        expired = session.scalar(select(AuditEvent).where(AuditEvent.resource_id == short,
                                                          AuditEvent.action == "cluster.expired"))
        repaired = session.scalars(select(EngineNode).where(EngineNode.cluster_id == train)
                                   .order_by(EngineNode.created_at)).all()
    assert [(e["action"], e["to_node_count"]) for e in audit][:1] == [("scale_up", 3)]
    assert audit[-1]["action"] == "scale_down" and audit[-1]["to_node_count"] == 1
    assert expired is not None
    assert len(repaired) == 2 and repaired[1].repair_of == repaired[0].id  # the repair's new machine
    expected: list[Line] = []
    opened: dict[str, datetime] = {}
    for row in history:
        moment = ensure_utc(row.at).replace(microsecond=0)
        if row.to_status == "RUNNING" and row.node_id not in opened:
            opened[row.node_id] = moment
        elif row.to_status in STOPS and row.node_id in opened:
            for s, e in clock_hours(opened.pop(row.node_id), moment):
                if e > s:
                    expected.append(Line("compute_on_demand", row.node_id, s, e,
                                         micros(rate, gpus, seconds(s, e)), teams[row.cluster_id]))
    assert not opened, "every node was torn down before the last pass"
    failed = [row for row in history if row.to_status == "FAILED"]
    assert [row.node_id for row in failed] == [repaired[0].id]
    assert len({line.resource for line in expected}) == 1 + 1 + 3 + 1  # train x2 machines, auto x3, short

    stored = [Line(row.kind, row.resource_id, ensure_utc(row.period_start), ensure_utc(row.period_end),
                   row.amount_micros, (row.labels or {}).get("team")) for row in world.records(project)]
    key = lambda line: (line.kind, line.resource, line.start)  # noqa: E731
    assert sorted(stored, key=key) == sorted(expected, key=key)

    # By hand (31.92 USD a node-hour): nlp: `short` 0:00-1:00 (its TTL), train-0 0:00-0:40 and its
    # repair 0:40-2:10 = 31.92 + 21.28 + 47.88; vision: `auto`'s first node 0:00-1:30 and the two it
    # added 0:20-1:30 (one scaled down then) and 0:20-2:10 = 47.88 + 37.24 + 58.52.
    assert len(stored) == 12

    per_team: dict[str | None, int] = defaultdict(int)
    for line in expected:
        per_team[line.team] += line.amount_micros
    assert per_team == {"nlp": 101_080_000, "vision": 143_640_000}
    groups = member.get("/v1/billing/usage", params={"group_by": "label:team"}).json()
    assert {g["key"]: Decimal(g["amount_usd"]) for g in groups["groups"]} == {
        team: Decimal(amount) / 1_000_000 for team, amount in per_team.items()
    }
    for team, budget_id in budgets.items():
        spent = admin.get(f"/v1/budgets/{budget_id}").json()["spent_usd"]
        assert Decimal(spent) == Decimal(per_team[team]) / 1_000_000, team
