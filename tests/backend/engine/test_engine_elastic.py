"""Elastic the Slurm way, in the engine: a driver that reads Slurm's power-saving requests (the optional
`power_requests` capability) has the autoscaler add the names slurmctld resumed (within max_nodes) and
remove the members it powered down (down to min_nodes), through the usual decision path. The requests
are modelled by the test; time passes on the engine's manual clock."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning import power_saving
from backend.provisioning.driver import PowerRequests, power_requests_of
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, cluster_body, drain, get
from tests.backend.engine.test_engine_autoscaling import ModelledQueue, scaled


class SlurmPowerSaving(ModelledQueue):
    """The modelled queue, plus the request file Slurm's ResumeProgram and SuspendProgram append to."""

    requests: list[tuple[str, str]]
    seen_members: list[list[str]]

    def power_requests(self, session: Session, cluster_id: str, members: Sequence[str]
                       ) -> PowerRequests | None:
        self.seen_members.append(sorted(members))
        pending, done = power_saving.settle(self.requests, members, power_saving.names("train", 4))
        self.requests = [(action, name) for action, name in self.requests if name not in done]
        return pending


def test_engine_elastic_cluster_follows_slurms_resume_and_suspend_requests(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    body = cluster_body(autoscaling={"min_nodes": 2, "max_nodes": 4, "scale_down_idle_minutes": 5})
    del body["node_count"]
    cluster = admin.post("/v1/clusters", json=body).json()
    settings = EngineSettings.model_validate(FAST)
    driver = SlurmPowerSaving(settings)
    driver.queue, driver.requests, driver.seen_members = [], [], []
    assert power_requests_of(driver) is not None
    worker = EngineWorker(sessions, settings, driver=driver, clock=clock)
    drain(worker)
    assert get(admin, cluster["id"])["node_count"] == 2
    assert worker.autoscale() == 0 and driver.seen_members[-1] == ["train-0", "train-1"]

    # `sbatch -N4`: slurmctld resumes the two cloud nodes; the engine adds them under those names.
    driver.requests = [("resume", "train-2"), ("resume", "train-3")]
    assert worker.autoscale() == 1
    assert get(admin, cluster["id"])["node_count"] == 4
    assert worker.autoscale() == 0  # coming up: no second decision
    drain(worker)
    grown = get(admin, cluster["id"])
    assert sorted(n["name"] for n in grown["nodes"]) == ["train-0", "train-1", "train-2", "train-3"]
    assert worker.autoscale() == 0 and driver.requests == []  # satisfied: acknowledged

    # Slurm powers two idle nodes down (before the queue rule's idle time): exactly those go.
    clock.advance(minutes=1)
    driver.requests = [("suspend", "train-1"), ("suspend", "train-3")]
    assert worker.autoscale() == 1
    drain(worker)
    shrunk = get(admin, cluster["id"])
    assert sorted(n["name"] for n in shrunk["nodes"]) == ["train-0", "train-2"]
    # Never below min_nodes (Slurm's SuspendExcNodes=...:min_nodes keeps it from asking, too).
    driver.requests = [("suspend", "train-0")]
    assert worker.autoscale() == 0
    assert get(admin, cluster["id"])["node_count"] == 2

    events = scaled(sessions, cluster["id"])
    assert [(e["action"], e["from_node_count"], e["to_node_count"]) for e in events] == [
        ("scale_up", 2, 4), ("scale_down", 4, 2)]
    assert events[0]["reason"] == ("Slurm resumed train-[2-3] for jobs pending for lack of nodes "
                                   "(ResumeProgram): adding 2")
    assert events[1]["removed_nodes"] == ["train-1", "train-3"]
    assert str(events[1]["reason"]).startswith("Slurm powered down train-1, train-3 after 5 minutes")
