"""Project quotas (max clusters, GPUs, hourly spend): GET /v1/quotas shows them with current use;
creates and scale-ups past one answer 403 `quota_exceeded` naming it, its value and the use, and store
nothing; concurrent creates never overshoot (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.cli import main
from backend.domain.catalog import default_catalog
from backend.domain.quotas import Limits, QuotaExceeded
from backend.services import clusters, quotas
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.models import Cluster
from tests.backend.conftest import Tenant

# 8 GPUs and 31.92 USD per hour a node
CLUSTER = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2}


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


def set_quota(sessions: sessionmaker[Session], project_id: str, **changes: int | None) -> None:
    with sessions.begin() as session:
        quotas.set_quota(session=session, project_id=project_id, changes=changes)


def refusal(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert response.status_code == 403, body
    assert response.headers["content-type"] == "application/problem+json"
    assert body["code"] == "quota_exceeded"
    return body


def cluster_count(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Cluster)) or 0


def test_quotas_refuse_creates_and_scale_ups_past_each_quota_and_show_use(
    admin: TestClient, member: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    unlimited = member.get("/v1/quotas").json()
    assert unlimited == {"max_clusters": None, "clusters_in_use": 0, "max_gpus": None, "gpus_in_use": 0,
                         "max_hourly_usd": None, "hourly_usd_in_use": "0", "updated_at": None}
    first = admin.post("/v1/clusters", json=CLUSTER).json()
    set_quota(sessions, tenant.project_id, max_gpus=24, max_clusters=2, max_hourly_micros=100_000_000)
    shown = member.get("/v1/quotas").json()
    assert {k: v for k, v in shown.items() if k != "updated_at"} == {
        "max_clusters": 2, "clusters_in_use": 1, "max_gpus": 24, "gpus_in_use": 16,
        "max_hourly_usd": "100", "hourly_usd_in_use": "63.84",
    }

    body = refusal(admin.post("/v1/clusters", json={**CLUSTER, "name": "big"}))  # 16 + 16 GPUs > 24
    assert (body["quota"], body["limit"], body["in_use"], body["requested"]) == ("max_gpus", 24, 16, 16)
    assert body["field"] == "node_count" and "max_gpus is 24 GPUs: 16 in use" in body["detail"]
    body = refusal(admin.patch(f"/v1/clusters/{first['id']}", json={"node_count": 4}))
    assert (body["quota"], body["in_use"], body["requested"]) == ("max_gpus", 16, 16)
    assert cluster_count(sessions) == 1
    assert admin.get(f"/v1/clusters/{first['id']}").json()["node_count"] == 2

    set_quota(sessions, tenant.project_id, max_gpus=None)  # cleared: the spend quota speaks next
    body = refusal(admin.patch(f"/v1/clusters/{first['id']}", json={"node_count": 4}))
    assert (body["quota"], body["limit"], body["in_use"], body["requested"]) == (
        "max_hourly_usd", "100", "63.84", "63.84")
    assert admin.post("/v1/clusters", json={**CLUSTER, "name": "one", "node_count": 1}).status_code == 201
    body = refusal(admin.post("/v1/clusters", json={**CLUSTER, "name": "third", "instance_type": "1xH100",
                                                    "node_count": 1}))
    assert (body["quota"], body["limit"], body["in_use"], body["requested"]) == ("max_clusters", 2, 2, 1)
    assert body["field"] is None

    # A quota lowered below the use blocks only what adds: scale-downs, labels and deletes go through,
    # and a deleted cluster no longer counts.
    set_quota(sessions, tenant.project_id, max_gpus=8)
    assert admin.patch(f"/v1/clusters/{first['id']}", json={"node_count": 1}).status_code == 200
    assert admin.patch(f"/v1/clusters/{first['id']}", json={"labels": {"team": "nlp"}}).status_code == 200
    assert admin.delete(f"/v1/clusters/{first['id']}").status_code == 202
    assert member.get("/v1/quotas").json()["gpus_in_use"] == 8


def create(sessions: sessionmaker[Session], project_id: str, name: str) -> None:
    with sessions.begin() as session:
        clusters.create_cluster(session=session, catalog=default_catalog(), project_id=project_id,
                                spec={**CLUSTER, "name": name, "node_count": 1})


def test_quotas_concurrent_creates_never_overshoot(
    tenant: Tenant, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    set_quota(sessions, tenant.project_id, max_gpus=24)  # room for 3 one-node 8xH100 clusters
    counted = quotas.held

    def slow_held(*args: Any, **kwargs: Any) -> Any:
        figures = counted(*args, **kwargs)
        time.sleep(0.1)  # widen the window between counting and storing: a race would show
        return figures

    monkeypatch.setattr(quotas, "held", slow_held)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def creator(index: int) -> None:
        try:
            create(sessions, tenant.project_id, f"c{index}")
            outcomes.append("created")
        except QuotaExceeded:
            outcomes.append("refused")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=creator, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 3
    assert cluster_count(sessions) == 3


def test_cli_set_quota_sets_keeps_and_clears_quotas(
    tenant: Tenant, sessions: sessionmaker[Session], database_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GPUCLOUD_DATABASE_URL", database_url)
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(tmp_path))

    def limits() -> Limits:
        with sessions() as session:
            return quotas.limits_of(session, tenant.project_id)

    assert main(["set-quota", "--project", "acme", "--max-gpus", "64", "--max-clusters", "4",
                 "--max-hourly-usd", "250.5"]) == 0
    assert capsys.readouterr().out == "max_gpus=64 max_clusters=4 max_hourly_usd=250.5\n"
    assert limits() == Limits(max_clusters=4, max_gpus=64, max_hourly_micros=250_500_000)
    assert main(["set-quota", "--project", "acme", "--max-gpus", "none"]) == 0  # the others are kept
    assert capsys.readouterr().out == "max_gpus=none max_clusters=4 max_hourly_usd=250.5\n"
    assert limits() == Limits(max_clusters=4, max_gpus=None, max_hourly_micros=250_500_000)

    assert main(["set-quota", "--project", "nobody", "--max-gpus", "8"]) == 1
    assert "no project named 'nobody'" in capsys.readouterr().err
    assert main(["set-quota", "--project", "acme"]) == 2
    assert "--max-gpus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        main(["set-quota", "--project", "acme", "--max-hourly-usd", "-1"])
    assert bad.value.code == 2 and "must be 0 or more" in capsys.readouterr().err
    assert limits() == Limits(max_clusters=4, max_gpus=None, max_hourly_micros=250_500_000)
