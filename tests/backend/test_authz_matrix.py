"""The authorization matrix: every keyed route of the app x every role x a team-scoped and an unscoped key
x who owns the target (the caller's team, another team, nobody: unlabelled, another project), each
answer checked against the documented one (docs/api.md "Roles" and "Team scopes"):

- a role without the route's permission: 403 `forbidden_role`, whoever owns the target;
- another project's object: 404; a team-scoped key on another team's or an unlabelled object: 404;
- a team-scoped key changing a project-wide object (the default security group) or granting credits:
  403 `out_of_scope`; reading the default security group: allowed;
- everything else: allowed (2xx). Lists hold exactly the objects the same rules let the caller read.

The routes come from the app (`backend.api.role_matrix.operations`) and each needs a row in ROUTES: a new
route without one fails `test_authz_matrix_has_a_row_for_every_route`. One world per database (SQLite,
PostgreSQL), built once for the module.
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from backend.api.role_matrix import operations
from backend.app import create_app
from backend.domain.access import ROLES, Permission, allows
from backend.domain.clock import SYSTEM_CLOCK, ManualClock
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from tests.backend.access_keys import client_for, make_key
from tests.backend.conftest import _postgres_admin_url, make_tenant
from tests.backend.engine.conftest import FAST, drain
from tests.backend.keys import ed25519_key
from tests.contract.private_keys import private_key

OWNERS = ("own", "other_team", "unlabelled", "other_project")
SCOPES = (None, "team=nlp")
OWNER_SCOPE = {"own": "team=nlp", "other_team": "team=cv", "unlabelled": None, "other_project": None}
OWNER_LABELS = {"own": {"team": "nlp"}, "other_team": {"team": "cv"}}
CLUSTER = {"region": "us-east-1", "instance_type": "1xH100", "node_count": 1, "orchestrator": "slurm"}
VOLUME = {"region": "us-east-1", "size_tib": 1}
RESERVATION = {"region": "us-east-1", "instance_type": "1xH100", "node_count": 1, "duration_days": 1}
HOST_POOL = {"region": "lab", "ssh_private_key": private_key("ed25519", "openssh"),
             "hosts": [{"address": "10.0.0.5"}]}
ALLOWED, FORBIDDEN, HIDDEN = "allowed", "403", "404"
# Path parameters naming an object -> the world's key for it.
OBJECT_PARAMS = ("cluster_id", "volume_id", "ssh_key_id", "budget_id", "security_group_id",
                 "reservation_id", "reserved_ip_id", "host_pool_id")
# The default group is in use by every cluster of the world: an allowed DELETE is refused for that.
DEFAULT_GROUP_DELETE = "409 security_group_in_use"


@dataclass(frozen=True)
class Row:
    """How one route is called in the matrix.

    body: the request body (given the caller's number, for unique names, and the target's labels);
    fresh: the world objects a call changes for good (deleted, reserved), made anew for each allowed call;
    unscoped_only: only keys without a team scope may call it (403 `out_of_scope` otherwise);
    lists: for a list route, the object whose ids it lists (checked per owner);
    cluster: the world's cluster it is called on (credentials need a Kubernetes one).
    """

    body: Callable[[int, dict[str, str]], Any] | None = None
    fresh: tuple[str, ...] = ()
    unscoped_only: bool = False
    lists: str | None = None
    cluster: str = "cluster_id"


def _name(n: int) -> str:
    return f"made-{n}"


ROUTES: dict[tuple[str, str], Row] = {
    ("GET", "/v1/audit-events"): Row(),
    ("GET", "/v1/billing/balance"): Row(),
    ("POST", "/v1/billing/credits"): Row(body=lambda n, _: {"amount_usd": "5"}, unscoped_only=True),
    ("GET", "/v1/billing/invoices"): Row(),
    ("GET", "/v1/billing/usage"): Row(),
    ("GET", "/v1/budgets"): Row(lists="budget_id"),
    ("POST", "/v1/budgets"): Row(body=lambda n, _: {"name": _name(n), "amount_usd": "100"}),
    ("GET", "/v1/budgets/{budget_id}"): Row(),
    ("PATCH", "/v1/budgets/{budget_id}"): Row(body=lambda n, _: {"amount_usd": "200"}),
    ("DELETE", "/v1/budgets/{budget_id}"): Row(fresh=("budget_id",)),
    ("GET", "/v1/clusters"): Row(lists="cluster_id"),
    ("POST", "/v1/clusters"): Row(body=lambda n, _: {**CLUSTER, "name": _name(n)}),
    ("GET", "/v1/clusters/{cluster_id}"): Row(),
    # The target's labels are kept: a scoped key may not drop its team's label.
    ("PATCH", "/v1/clusters/{cluster_id}"): Row(body=lambda n, labels: {"labels": {**labels, "n": str(n)}}),
    ("DELETE", "/v1/clusters/{cluster_id}"): Row(fresh=("cluster_id",)),
    ("POST", "/v1/clusters/{cluster_id}/actions"): Row(body=lambda n, _: {"action": "restart_workers"}),
    ("GET", "/v1/clusters/{cluster_id}/artifacts/{file}"): Row(),
    ("GET", "/v1/clusters/{cluster_id}/credentials"): Row(cluster="kube_cluster_id"),
    ("POST", "/v1/clusters/{cluster_id}/credentials/renew"): Row(cluster="kube_cluster_id"),
    ("GET", "/v1/clusters/{cluster_id}/jobs"): Row(),
    ("GET", "/v1/clusters/{cluster_id}/logs"): Row(),
    ("GET", "/v1/clusters/{cluster_id}/metrics"): Row(),
    ("GET", "/v1/clusters/{cluster_id}/nodes"): Row(),
    ("GET", "/v1/clusters/{cluster_id}/nodes/{name}/events"): Row(),
    ("POST", "/v1/clusters/{cluster_id}/nodes/{name}/actions"): Row(
        body=lambda n, _: {"action": "drain"}, fresh=("cluster_id",)
    ),
    ("GET", "/v1/clusters/{cluster_id}/scale-down-preview"): Row(),
    ("POST", "/v1/clusters/{cluster_id}/reserve-ip"): Row(body=lambda n, _: {"name": _name(n)},
                                                         fresh=("cluster_id",)),
    ("POST", "/v1/clusters/{cluster_id}/volumes/{volume_id}"): Row(fresh=("volume_id",)),
    ("DELETE", "/v1/clusters/{cluster_id}/volumes/{volume_id}"): Row(fresh=("attached_volume_id",)),
    ("GET", "/v1/host-pools"): Row(lists="host_pool_id"),
    ("POST", "/v1/host-pools"): Row(body=lambda n, _: {**HOST_POOL, "name": _name(n)}),
    ("GET", "/v1/host-pools/{host_pool_id}"): Row(),
    ("PATCH", "/v1/host-pools/{host_pool_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/host-pools/{host_pool_id}"): Row(fresh=("host_pool_id",)),
    ("POST", "/v1/host-pools/{host_pool_id}/probe"): Row(),
    ("GET", "/v1/instance-types"): Row(),
    ("POST", "/v1/pricing/estimate"): Row(body=lambda n, _: {**CLUSTER, "name": "estimate"}),
    ("GET", "/v1/quotas"): Row(),
    ("GET", "/v1/regions"): Row(),
    ("GET", "/v1/reservations"): Row(lists="reservation_id"),
    ("POST", "/v1/reservations"): Row(body=lambda n, _: {**RESERVATION, "name": _name(n)}),
    ("GET", "/v1/reservations/{reservation_id}"): Row(),
    ("PATCH", "/v1/reservations/{reservation_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/reservations/{reservation_id}"): Row(fresh=("reservation_id",)),
    ("GET", "/v1/reserved-ips"): Row(lists="reserved_ip_id"),
    ("POST", "/v1/reserved-ips"): Row(body=lambda n, _: {"region": "us-east-1"}),
    ("GET", "/v1/reserved-ips/{reserved_ip_id}"): Row(),
    ("PATCH", "/v1/reserved-ips/{reserved_ip_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/reserved-ips/{reserved_ip_id}"): Row(fresh=("reserved_ip_id",)),
    ("GET", "/v1/security-groups"): Row(lists="security_group_id"),
    ("POST", "/v1/security-groups"): Row(body=lambda n, _: {"name": _name(n)}),
    ("GET", "/v1/security-groups/{security_group_id}"): Row(),
    ("PATCH", "/v1/security-groups/{security_group_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/security-groups/{security_group_id}"): Row(fresh=("security_group_id",)),
    ("GET", "/v1/ssh-keys"): Row(lists="ssh_key_id"),
    ("POST", "/v1/ssh-keys"): Row(body=lambda n, _: {"name": _name(n), "public_key": ed25519_key()}),
    ("GET", "/v1/ssh-keys/{ssh_key_id}"): Row(),
    ("PATCH", "/v1/ssh-keys/{ssh_key_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/ssh-keys/{ssh_key_id}"): Row(fresh=("ssh_key_id",)),
    ("GET", "/v1/volumes"): Row(lists="volume_id"),
    ("POST", "/v1/volumes"): Row(body=lambda n, _: {**VOLUME, "name": _name(n)}),
    ("GET", "/v1/volumes/{volume_id}"): Row(),
    ("PATCH", "/v1/volumes/{volume_id}"): Row(body=lambda n, _: {"name": _name(n)}),
    ("DELETE", "/v1/volumes/{volume_id}"): Row(fresh=("volume_id",)),
}


@dataclass
class World:
    app: FastAPI
    engine_worker: EngineWorker
    creators: dict[str, TestClient]  # owner -> an admin client that makes its objects
    callers: dict[tuple[str, str | None], TestClient]  # (role, scope) -> client of project acme
    objects: dict[str, dict[str, str]]  # owner -> object param -> id
    default_group: str
    counter: itertools.count[int] = field(default_factory=itertools.count)


_numbers = itertools.count()  # unique names for the objects the world makes


def _created(response: Any) -> str:
    assert response.status_code in (201, 202), response.text
    ident: str = response.json()["id"]
    return ident


def _make(world_creators: dict[str, TestClient], owner: str, kind: str, worker: EngineWorker,
          cluster_id: str | None = None) -> str:
    """A new object of `kind` for `owner`, made by its creator (a cluster is provisioned)."""
    client = world_creators[owner]
    tag = f"{owner.replace('_', '-')}-{next(_numbers)}"
    if kind == "ssh_key_id":
        return _created(client.post("/v1/ssh-keys", json={"name": tag, "public_key": ed25519_key()}))
    if kind in ("volume_id", "attached_volume_id"):
        volume = _created(client.post("/v1/volumes", json={**VOLUME, "name": tag}))
        if kind == "attached_volume_id":
            attached = client.post(f"/v1/clusters/{cluster_id}/volumes/{volume}")
            assert attached.status_code == 200, attached.text
        return volume
    if kind in ("cluster_id", "kube_cluster_id"):
        orchestrator = "kubernetes" if kind == "kube_cluster_id" else "slurm"
        cluster = _created(client.post("/v1/clusters", json={**CLUSTER, "name": tag,
                                                             "orchestrator": orchestrator}))
        drain(worker)
        return cluster
    if kind == "budget_id":
        return _created(client.post("/v1/budgets", json={"name": tag, "amount_usd": "1000"}))
    if kind == "security_group_id":
        return _created(client.post("/v1/security-groups", json={"name": tag}))
    if kind == "reservation_id":
        return _created(client.post("/v1/reservations", json={**RESERVATION, "name": tag}))
    if kind == "host_pool_id":
        return _created(client.post("/v1/host-pools", json={**HOST_POOL, "name": tag}))
    assert kind == "reserved_ip_id", kind
    return _created(client.post("/v1/reserved-ips", json={"region": "us-east-1"}))



@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def matrix_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One migrated database for the module's world (a copy of the session's template), SQLite and
    PostgreSQL."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("authz") / "gpucloud.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    template = request.getfixturevalue("postgres_template")
    admin_url = make_url(_postgres_admin_url())
    name = f"gpucloud_authz_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="module")
def world(matrix_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    settings = Settings(database_url=matrix_database, data_dir=tmp_path_factory.mktemp("authz-data"),
                        embedded_worker=False, embedded_billing=False, auth_cache_seconds=0)
    acme, globex = make_tenant(settings, "acme"), make_tenant(settings, "globex")
    app = create_app(settings)
    engine = make_engine(settings)
    worker = EngineWorker(make_session_factory(engine, write=True), EngineSettings(**FAST),  # type: ignore[arg-type]
                          clock=ManualClock(SYSTEM_CLOCK.now()))
    with TestClient(app, raise_server_exceptions=False) as anonymous:
        admin = client_for(anonymous, acme.admin_key)
        creators = {
            "own": client_for(anonymous, make_key(settings, "acme", "admin", "team=nlp")),
            "other_team": client_for(anonymous, make_key(settings, "acme", "admin", "team=cv")),
            "unlabelled": admin,
            "other_project": client_for(anonymous, globex.admin_key),
        }
        objects: dict[str, dict[str, str]] = {}
        for owner in OWNERS:
            kinds = (*OBJECT_PARAMS, "kube_cluster_id")
            made = {kind: _make(creators, owner, kind, worker) for kind in kinds}
            made["attached_volume_id"] = _make(creators, owner, "attached_volume_id", worker,
                                               made["cluster_id"])
            objects[owner] = made
        callers = {(role, scope): client_for(anonymous, make_key(settings, "acme", role, scope))
                   for role in ROLES for scope in SCOPES}
        groups = admin.get("/v1/security-groups").json()["items"]
        default = next(g["id"] for g in groups if g["is_default"])  # made when the first cluster needed it
        yield World(app, worker, creators, callers, objects, default)
    engine.dispose()
    app.state.gpucloud.engine.dispose()


def expected(method: str, path: str, permission: Permission, role: str, scope: str | None,
             owner: str | None) -> str:
    """The documented answer for a caller of `role` and `scope` on a target of `owner` (None: no target
    object; "default": the project's default security group)."""
    if not allows(role, permission):
        return FORBIDDEN
    if scope is not None and ROUTES[(method, path)].unscoped_only:
        return FORBIDDEN
    if owner == "other_project" or (scope is not None and owner in ("other_team", "unlabelled")):
        return HIDDEN
    if owner == "default" and scope is not None and method in ("PATCH", "DELETE"):
        return FORBIDDEN
    if owner == "default" and method == "DELETE":
        return DEFAULT_GROUP_DELETE
    return ALLOWED


def _targets(path: str) -> tuple[str | None, ...]:
    """The owners a route is called for: each owner when it names an object, else none."""
    if not any("{" + param + "}" in path for param in OBJECT_PARAMS):
        return (None,)
    return (*OWNERS, "default") if "{security_group_id}" in path else OWNERS


def _ids(world: World, owner: str | None, row: Row, method: str, path: str) -> dict[str, str]:
    """The path parameters for a call on `owner`'s objects (fresh ones where the call uses them up)."""
    if owner is None:
        return {}
    base = "own" if owner == "default" else owner
    ids = dict(world.objects[base])
    ids["cluster_id"] = ids[row.cluster]
    if owner == "default":
        ids["security_group_id"] = world.default_group
    for kind in row.fresh if owner != "default" else ():
        made = _make(world.creators, owner, kind, world.engine_worker, ids["cluster_id"])
        ids["volume_id" if kind == "attached_volume_id" else kind] = made
    if path == "/v1/clusters/{cluster_id}/volumes/{volume_id}" and method == "DELETE" and not row.fresh:
        ids["volume_id"] = ids["attached_volume_id"]
    creator = world.creators[base]
    if "{name}" in path:
        nodes = creator.get(f"/v1/clusters/{ids['cluster_id']}/nodes").json()["items"]
        ids["name"] = nodes[0]["name"]
    ids["file"] = "hosts"
    return ids


def _answer(status: int, body: dict[str, Any]) -> str:
    if status == 403 and body.get("code") in ("forbidden_role", "out_of_scope"):
        return FORBIDDEN
    if status == 404 and body.get("code") == "not_found" and body.get("field") in OBJECT_PARAMS:
        return HIDDEN  # the object "does not exist" for the caller (not: a missing node, log or file)
    return ALLOWED if 200 <= status < 300 else f"{status} {body.get('code')}"


def test_authz_matrix_has_a_row_for_every_route(world: World) -> None:
    routes = {(method, path) for method, path, _, _ in operations(world.app)}
    assert routes == set(ROUTES), "every keyed route needs a row in ROUTES (and no row outlives its route)"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("scope", SCOPES, ids=("unscoped", "team"))
def test_authz_matrix_every_route_x_role_x_scope_x_owner(world: World, role: str, scope: str | None) -> None:
    caller = world.callers[(role, scope)]
    wrong = []
    for method, path, permission, _ in operations(world.app):
        row = ROUTES[(method, path)]
        for owner in _targets(path):
            want = expected(method, path, permission, role, scope, owner)
            # Only a call that goes through uses its objects up: refused ones are tried on the shared world.
            used = row if want == ALLOWED else Row(body=row.body, cluster=row.cluster)
            ids = _ids(world, owner, used, method, path)
            labels = OWNER_LABELS.get(owner or "", {}) if owner != "default" else {}
            body = row.body(next(world.counter), labels) if row.body else None
            response = caller.request(method, path.format_map(ids), json=body)
            got = _answer(response.status_code, response.json() if response.content and
                          response.headers.get("content-type", "").endswith("json") else {})
            if got != want:
                wrong.append(f"{method} {path} on {owner}: want {want}, got {got} {response.text[:200]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("scope", SCOPES, ids=("unscoped", "team"))
def test_authz_matrix_lists_hold_exactly_what_the_caller_may_read(world: World, scope: str | None) -> None:
    caller = world.callers[("viewer", scope)]
    for (_, path), row in ROUTES.items():
        if row.lists is None:
            continue
        listed: set[str] = set()
        token = None
        while True:
            page = caller.get(path, params={"page_size": 100, **({"page_token": token} if token else {})})
            assert page.status_code == 200, page.text
            listed |= {item["id"] for item in page.json()["items"]}
            token = page.json()["next_page_token"]
            if token is None:
                break
        for owner in OWNERS:
            visible = owner == "own" or (scope is None and owner != "other_project")
            assert (world.objects[owner][row.lists] in listed) is visible, (path, owner)
        if row.lists == "security_group_id":
            assert world.default_group in listed  # project-wide: every team reads it
