"""Team scopes: a key made with `--scope team=nlp` sees, changes and references only its team's clusters,
volumes and SSH keys (others answer 404 as another project's do), lists and pages hold only them, and
what it creates carries the label; unscoped keys see everything. Billing usage lines follow the same
rule. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.api import cluster_workload
from backend.domain.api_keys import display_prefix
from backend.services import auth
from backend.settings import Settings
from backend.store.billing_models import UsageRecord
from backend.store.db import make_engine, make_session_factory
from tests.backend.access_keys import client_for, make_key
from tests.backend.conftest import Tenant
from tests.backend.keys import ed25519_key

CLUSTER = {"region": "us-east-1", "instance_type": "1xH100", "node_count": 1}


@dataclass
class Team:
    client: TestClient
    ssh_key: str
    volume: str
    cluster: str


def _team(admin: TestClient, settings: Settings, name: str, role: str = "admin") -> Team:
    client = client_for(admin, make_key(settings, "acme", role, f"team={name}"))
    writer = (
        client if role == "admin" else client_for(admin, make_key(settings, "acme", "admin", f"team={name}"))
    )
    key = writer.post("/v1/ssh-keys", json={"name": f"{name}-key", "public_key": ed25519_key()})
    volume = writer.post("/v1/volumes", json={"name": f"{name}-data", "region": "us-east-1", "size_tib": 1})
    assert key.status_code == volume.status_code == 201, (key.text, volume.text)
    cluster = writer.post(
        "/v1/clusters", json={**CLUSTER, "name": f"{name}-train", "ssh_key_ids": [key.json()["id"]]}
    )
    assert cluster.status_code == 201, cluster.text
    return Team(client, key.json()["id"], volume.json()["id"], cluster.json()["id"])


@pytest.fixture
def teams(admin: TestClient, settings: Settings) -> tuple[Team, Team]:
    return _team(admin, settings, "nlp"), _team(admin, settings, "vision")


def _ids(client: TestClient, path: str, **params: Any) -> list[str]:
    """Every id of a list, walking its pages one item at a time."""
    ids: list[str] = []
    token = None
    while True:
        page = client.get(path, params={**params, "page_size": 1, **({"page_token": token} if token else {})})
        assert page.status_code == 200, page.text
        ids += [item["id"] for item in page.json()["items"]]
        token = page.json()["next_page_token"]
        if token is None:
            return ids


def test_scope_key_cannot_read_change_or_delete_another_teams_resources(teams: tuple[Team, Team]) -> None:
    nlp, vision = teams
    other = vision.client
    for path in (f"/v1/clusters/{nlp.cluster}", f"/v1/volumes/{nlp.volume}", f"/v1/ssh-keys/{nlp.ssh_key}"):
        for method, body in (("GET", None), ("PATCH", {"name": "stolen"}), ("DELETE", None)):
            response = other.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
    for tail in ("nodes", "metrics", "jobs", "logs", "artifacts/hosts", "credentials"):
        assert other.get(f"/v1/clusters/{nlp.cluster}/{tail}").status_code == 404, tail
    assert (
        other.post(f"/v1/clusters/{nlp.cluster}/actions", json={"action": "restart_workers"}).status_code
        == 404
    )
    # The NLP team's resources are untouched and still its own.
    assert nlp.client.get(f"/v1/clusters/{nlp.cluster}").json()["name"] == "nlp-train"
    assert nlp.client.get(f"/v1/volumes/{nlp.volume}").json()["name"] == "nlp-data"


def test_scope_lists_pages_and_filters_hold_only_the_teams_resources(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, vision = teams
    extra = nlp.client.post("/v1/volumes", json={"name": "nlp-more", "region": "us-east-1", "size_tib": 1})
    vision.client.post("/v1/volumes", json={"name": "vision-more", "region": "us-east-1", "size_tib": 1})
    assert _ids(nlp.client, "/v1/volumes") == [nlp.volume, extra.json()["id"]]
    assert _ids(nlp.client, "/v1/clusters") == [nlp.cluster]
    assert _ids(nlp.client, "/v1/ssh-keys") == [nlp.ssh_key]
    assert _ids(nlp.client, "/v1/clusters", name="vision-train") == []
    assert _ids(nlp.client, "/v1/volumes", name="vision-data") == []
    assert _ids(vision.client, "/v1/clusters", name="vision-train") == [vision.cluster]
    # A page token from an unscoped walk does not open the other team's rows either.
    first = admin.get("/v1/volumes", params={"page_size": 1}).json()
    assert first["items"][0]["id"] == nlp.volume
    after = nlp.client.get("/v1/volumes", params={"page_token": first["next_page_token"]}).json()
    assert [v["id"] for v in after["items"]] == [extra.json()["id"]]
    # An unscoped key sees every team's.
    assert len(_ids(admin, "/v1/volumes")) == 4
    assert set(_ids(admin, "/v1/clusters")) == {nlp.cluster, vision.cluster}


def test_scope_references_to_another_teams_objects_are_not_found(teams: tuple[Team, Team]) -> None:
    nlp, vision = teams
    created = nlp.client.post(
        "/v1/clusters",
        json={**CLUSTER, "name": "borrow", "ssh_key_ids": [vision.ssh_key], "volume_ids": [vision.volume]},
    )
    assert created.status_code == 422, created.text
    errors = {(e["field"], e["code"]) for e in created.json()["errors"]}
    assert errors == {("ssh_key_ids[0]", "not_found"), ("volume_ids[0]", "not_found")}
    attach = nlp.client.post(f"/v1/clusters/{nlp.cluster}/volumes/{vision.volume}")
    assert (attach.status_code, attach.json()["field"]) == (404, "volume_id")
    patched = nlp.client.patch(f"/v1/clusters/{nlp.cluster}", json={"volume_ids": [vision.volume]})
    assert (patched.status_code, patched.json()["field"]) == (422, "volume_ids[0]")
    detach = nlp.client.delete(f"/v1/clusters/{nlp.cluster}/volumes/{vision.volume}")
    assert detach.status_code == 404
    # Its own volume attaches.
    own = nlp.client.post(f"/v1/clusters/{nlp.cluster}/volumes/{nlp.volume}")
    assert own.status_code == 200 and own.json()["volume_ids"] == [nlp.volume]


def test_scope_creates_carry_the_label_and_another_value_is_refused(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, _ = teams
    cluster = nlp.client.get(f"/v1/clusters/{nlp.cluster}").json()
    assert cluster["labels"] == {"team": "nlp"}
    refused = nlp.client.post("/v1/clusters", json={**CLUSTER, "name": "away", "labels": {"team": "vision"}})
    assert refused.status_code == 403, refused.text
    problem = refused.json()
    assert (problem["code"], problem["field"]) == ("out_of_scope", "labels.team")
    assert "team=nlp" in problem["detail"]
    handed = nlp.client.patch(f"/v1/clusters/{nlp.cluster}", json={"labels": {"team": "vision"}})
    assert (handed.status_code, handed.json()["field"]) == (403, "labels.team")
    kept = nlp.client.patch(f"/v1/clusters/{nlp.cluster}", json={"labels": {"owner": "ana"}})
    assert kept.status_code == 200 and kept.json()["labels"] == {"owner": "ana", "team": "nlp"}
    # An unscoped key hands a cluster to another team: from then on only that team (and unscoped keys) see it.
    moved = admin.patch(f"/v1/clusters/{nlp.cluster}", json={"labels": {"team": "vision"}})
    assert moved.status_code == 200
    assert nlp.client.get(f"/v1/clusters/{nlp.cluster}").status_code == 404
    assert teams[1].client.get(f"/v1/clusters/{nlp.cluster}").status_code == 200


def test_scope_operator_key_scales_its_team_only(admin: TestClient, settings: Settings) -> None:
    nlp = _team(admin, settings, "nlp", role="operator")
    vision = _team(admin, settings, "vision")
    scaled = nlp.client.patch(f"/v1/clusters/{nlp.cluster}", json={"labels": {"team": "nlp", "x": "y"}})
    assert scaled.status_code == 200, scaled.text
    assert nlp.client.patch(f"/v1/clusters/{vision.cluster}", json={"labels": {}}).status_code == 404


def test_scope_ssh_key_registered_by_another_team_is_409_without_its_id(
    admin: TestClient, settings: Settings
) -> None:
    nlp = client_for(admin, make_key(settings, "acme", "admin", "team=nlp"))
    vision = client_for(admin, make_key(settings, "acme", "admin", "team=vision"))
    public_key = ed25519_key()
    assert nlp.post("/v1/ssh-keys", json={"name": "k", "public_key": public_key}).status_code == 201
    again = vision.post("/v1/ssh-keys", json={"name": "k", "public_key": public_key})
    assert again.status_code == 409 and again.json()["code"] == "duplicate_ssh_key"
    assert "existing_id" not in again.json()
    same_team = nlp.post("/v1/ssh-keys", json={"name": "k", "public_key": public_key})
    assert same_team.status_code == 409 and "existing_id" in same_team.json()


def test_scope_idempotency_key_of_another_team_is_not_replayed(admin: TestClient, settings: Settings) -> None:
    nlp = client_for(admin, make_key(settings, "acme", "admin", "team=nlp"))
    vision = client_for(admin, make_key(settings, "acme", "admin", "team=vision"))
    body = {"name": "same", "region": "us-east-1", "size_tib": 1}
    first = nlp.post("/v1/volumes", json=body, headers={"Idempotency-Key": "vol-1"})
    assert first.status_code == 201
    other = vision.post("/v1/volumes", json=body, headers={"Idempotency-Key": "vol-1"})
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert "Idempotent-Replayed" not in other.headers


def test_scope_usage_lines_are_the_teams_clusters_and_volumes(
    teams: tuple[Team, Team], admin: TestClient, settings: Settings, tenant: Tenant
) -> None:
    nlp, vision = teams
    lines = {  # resource id -> (resource type, cluster id)
        "nod_nlp": ("node", nlp.cluster),
        "nod_vision": ("node", vision.cluster),
        nlp.volume: ("volume", None),
        vision.volume: ("volume", None),
    }
    engine = make_engine(settings)
    hour = datetime(2026, 3, 2, 9, tzinfo=UTC)
    with make_session_factory(engine, write=True).begin() as session:
        for resource_id, (resource_type, cluster_id) in lines.items():
            session.add(
                UsageRecord(
                    idempotency_key=f"test:{resource_id}",
                    project_id=tenant.project_id,
                    kind="storage",
                    resource_type=resource_type,
                    resource_id=resource_id,
                    cluster_id=cluster_id,
                    region="us-east-1",
                    period_start=hour,
                    period_end=hour + timedelta(hours=1),
                    seconds=3600,
                    units=Decimal(1),
                    unit_price_usd=Decimal(1),
                    amount_micros=1_000_000,
                    recorded_at=hour + timedelta(hours=1),
                    # As the meter writes them: the labels of the line's object when charged.
                    labels={"team": "nlp" if resource_id in ("nod_nlp", nlp.volume) else "vision"},
                )
            )
    engine.dispose()

    def usage(client: TestClient, **params: str) -> set[str]:
        response = client.get("/v1/billing/usage", params=params)
        assert response.status_code == 200, response.text
        return {item["resource_id"] for item in response.json()["items"]}

    assert usage(nlp.client) == {"nod_nlp", nlp.volume}
    assert usage(vision.client) == {"nod_vision", vision.volume}
    assert usage(nlp.client, cluster_id=vision.cluster) == set()
    assert usage(admin) == set(lines)


def _default_group(admin: TestClient) -> str:
    """The project's default security group (made when the first cluster without groups needed it)."""
    groups = admin.get("/v1/security-groups").json()["items"]
    default: str = next(group["id"] for group in groups if group["is_default"])
    return default


def test_scope_default_security_group_is_read_by_teams_and_changed_only_without_a_scope(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, _ = teams
    default = _default_group(admin)
    path = f"/v1/security-groups/{default}"
    assert nlp.client.get(path).status_code == 200
    assert default in {group["id"] for group in nlp.client.get("/v1/security-groups").json()["items"]}
    before = admin.get(path).json()
    for method, body in (("PATCH", {"ingress": []}), ("DELETE", None)):
        refused = nlp.client.request(method, path, json=body)
        assert refused.status_code == 403, (method, refused.text)
        problem = refused.json()
        assert problem["code"] == "out_of_scope"
        assert "team=nlp" in problem["detail"] and "default security group" in problem["detail"]
    assert admin.get(path).json() == before  # every team's clusters keep their firewall
    named = nlp.client.post("/v1/clusters", json={**CLUSTER, "name": "fw", "security_group_ids": [default]})
    assert named.status_code == 201, named.text  # what a team reads, its clusters may name
    renamed = admin.patch(path, json={"description": "set by the platform team"})
    assert renamed.status_code == 200, renamed.text


def _budget(client: TestClient, name: str, **extra: Any) -> Any:
    return client.post("/v1/budgets", json={"name": name, "amount_usd": "100", **extra})


def test_scope_budgets_are_the_teams_by_their_label_filter(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, vision = teams
    mine = _budget(nlp.client, "nlp-month")
    assert mine.status_code == 201, mine.text
    assert mine.json()["label_filter"] == {"key": "team", "value": "nlp"}  # left out: set to the scope
    theirs = _budget(vision.client, "vision-month").json()["id"]
    project = _budget(admin, "everything").json()["id"]
    vision_filter = {"key": "team", "value": "vision"}
    on_other = _budget(nlp.client, "steal", label_filter=vision_filter, action="block_new")
    assert on_other.status_code == 403 and on_other.json()["code"] == "out_of_scope", on_other.text
    assert on_other.json()["field"] == "label_filter"
    assert _ids(nlp.client, "/v1/budgets") == [mine.json()["id"]]
    for other in (theirs, project):
        for method, body in (("GET", None), ("PATCH", {"amount_usd": "1"}), ("DELETE", None)):
            response = nlp.client.request(method, f"/v1/budgets/{other}", json=body)
            assert response.status_code == 404, (method, response.text)
    widen = nlp.client.patch(f"/v1/budgets/{mine.json()['id']}", json={"label_filter": vision_filter})
    assert widen.status_code == 403 and widen.json()["code"] == "out_of_scope"
    kept = nlp.client.patch(f"/v1/budgets/{mine.json()['id']}", json={"label_filter": None})
    assert kept.status_code == 200 and kept.json()["label_filter"] == {"key": "team", "value": "nlp"}
    assert Decimal(admin.get(f"/v1/budgets/{theirs}").json()["amount_usd"]) == 100
    assert set(_ids(admin, "/v1/budgets")) == {mine.json()["id"], theirs, project}


RESERVATION = {"region": "us-east-1", "instance_type": "1xH100", "node_count": 1, "duration_days": 1}


def test_scope_reservations_carry_labels_and_are_the_teams(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, vision = teams
    mine = nlp.client.post("/v1/reservations", json={**RESERVATION, "name": "nlp", "labels": {"cost": "42"}})
    assert mine.status_code == 201, mine.text
    assert mine.json()["labels"] == {"cost": "42", "team": "nlp"}
    assert nlp.client.get(f"/v1/reservations/{mine.json()['id']}").json()["labels"] == mine.json()["labels"]
    away = nlp.client.post("/v1/reservations", json={**RESERVATION, "name": "x", "labels": {"team": "cv"}})
    assert (away.status_code, away.json()["field"]) == (403, "labels.team")
    bad = admin.post("/v1/reservations", json={**RESERVATION, "name": "x", "labels": {"Bad Key": "v"}})
    assert bad.status_code == 422 and bad.json()["field"].startswith("labels")
    unlabelled = admin.post("/v1/reservations", json={**RESERVATION, "name": "platform"})
    assert unlabelled.status_code == 201 and unlabelled.json()["labels"] == {}
    for other in (mine.json()["id"], unlabelled.json()["id"]):
        assert vision.client.get(f"/v1/reservations/{other}").status_code == 404
        assert vision.client.delete(f"/v1/reservations/{other}").status_code == 404
    assert _ids(vision.client, "/v1/reservations") == []
    assert _ids(nlp.client, "/v1/reservations") == [mine.json()["id"]]
    assert set(_ids(admin, "/v1/reservations")) == {mine.json()["id"], unlabelled.json()["id"]}


def test_scope_cluster_cannot_draw_another_teams_reservation(teams: tuple[Team, Team]) -> None:
    nlp, vision = teams
    reservation = nlp.client.post("/v1/reservations", json={**RESERVATION, "name": "nlp"}).json()["id"]
    borrow = {**CLUSTER, "name": "borrow", "reservation_id": reservation}
    drawn = vision.client.post("/v1/clusters", json=borrow)
    assert drawn.status_code == 422, drawn.text
    assert {(e["field"], e["code"]) for e in drawn.json()["errors"]} == {("reservation_id", "not_found")}
    own = nlp.client.post("/v1/clusters", json={**CLUSTER, "name": "draw", "reservation_id": reservation})
    assert own.status_code == 201, own.text


def test_scope_credits_are_granted_by_unscoped_admins_only(
    teams: tuple[Team, Team], admin: TestClient
) -> None:
    nlp, _ = teams
    refused = nlp.client.post("/v1/billing/credits", json={"amount_usd": "1000"})
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "out_of_scope" and "credits" in refused.json()["detail"]
    assert Decimal(admin.get("/v1/billing/balance").json()["balance_usd"]) == 0
    assert admin.post("/v1/billing/credits", json={"amount_usd": "1000"}).status_code == 201


def test_scope_log_stream_ends_within_seconds_of_its_key_being_revoked(
    admin: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_workload, "FOLLOW_POLL_SECONDS", 0.1)
    monkeypatch.setattr(cluster_workload, "FOLLOW_MAX_SECONDS", 30.0)  # the old bound, shortened
    key = make_key(settings, "acme", "viewer", "team=nlp")
    writer = client_for(admin, make_key(settings, "acme", "admin", "team=nlp"))
    cluster = writer.post("/v1/clusters", json={**CLUSTER, "name": "logs", "orchestrator": "slurm"})
    assert cluster.status_code == 201, cluster.text

    def revoke() -> None:
        engine = make_engine(settings)
        with make_session_factory(engine, write=True).begin() as session:
            auth.revoke_api_key(session=session, prefix=display_prefix(key))
        engine.dispose()

    timer = threading.Timer(1.0, revoke)
    timer.start()
    started = time.monotonic()
    try:
        streamed = client_for(admin, key).get(f"/v1/clusters/{cluster.json()['id']}/logs",
                                              params={"follow": "true"})
    finally:
        timer.join()
    assert streamed.status_code == 200
    assert time.monotonic() - started < 10
    assert streamed.text.rstrip().endswith(": the API key was revoked; the stream ends")
    assert client_for(admin, key).get("/v1/clusters").status_code == 401
