"""Races between two replicas of the API on one database (SQLite and PostgreSQL): every write racing a
move or a delete answers a documented status or succeeds (never 500), and the state left is consistent;
a retry overlapping the first request with its Idempotency-Key replays that request's answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.app import create_app
from backend.services import clusters, quotas, reserved_ips
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.models import Cluster
from tests.backend.conftest import Tenant, make_tenant
from tests.backend.keys import ed25519_key


class Answer(Protocol):
    """What the tests read of a TestClient response."""

    @property
    def status_code(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    def json(self) -> Any: ...


Call = Callable[[TestClient], Answer]
# Slows the first request's operation down, so that its retry surely arrives while it is in flight.
IN_FLIGHT_SECONDS = 0.4


@pytest.fixture
def replicas(settings: Settings) -> Iterator[tuple[FastAPI, FastAPI]]:
    """Two app instances on the same database, as two `serve` replicas behind a load balancer."""
    apps = (create_app(settings), create_app(settings))
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:  # run both lifespans
        # FastAPI compiles its routes on the first request, building pydantic adapters for the response
        # models the two apps share: in one process (not so across `serve` processes) two first requests
        # at once race on them. A path no route matches compiles them all, one app after the other.
        for client in (first, second):
            assert client.get("/v1/warm-up").status_code == 404
        yield apps
    for app in apps:
        app.state.gpucloud.engine.dispose()


@pytest.fixture
def acme(settings: Settings) -> Tenant:
    return make_tenant(settings, "acme")


def _client(app: FastAPI, tenant: Tenant) -> TestClient:
    return TestClient(app, headers={"Authorization": f"Bearer {tenant.admin_key}"},
                      raise_server_exceptions=False)


def _together(
    calls: list[tuple[FastAPI, Call]], tenant: Tenant, *, stagger: float = 0.0
) -> list[Answer]:
    """Send the calls at the same moment (each `stagger` seconds after the previous one), one thread and
    one client each; the responses in order."""
    barrier = threading.Barrier(len(calls))

    def send(index: int, app: FastAPI, call: Call) -> Answer:
        client = _client(app, tenant)
        barrier.wait()
        time.sleep(index * stagger)
        return call(client)

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(send, i, app, call) for i, (app, call) in enumerate(calls)]
        return [future.result() for future in futures]


def _ok(response: Answer, *allowed: int) -> int:
    assert response.status_code in allowed, response.text
    return response.status_code


def _cluster(client: TestClient, **spec: Any) -> dict[str, Any]:
    body = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1, **spec}
    response = client.post("/v1/clusters", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _ip(client: TestClient) -> str:
    response = client.post("/v1/reserved-ips", json={"region": "us-east-1"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _attach(cluster_id: str, reserved_ip_id: str | None) -> Call:
    return lambda c: c.patch(f"/v1/clusters/{cluster_id}", json={"reserved_ip_id": reserved_ip_id})


def _post(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Call:
    return lambda c: c.post(path, json=body, headers=headers)


def _delete(path: str) -> Call:
    return lambda c: c.delete(path)


def _holders(client: TestClient, cluster_ids: list[str]) -> dict[str, str | None]:
    return {cid: client.get(f"/v1/clusters/{cid}").json()["reserved_ip_id"] for cid in cluster_ids}


def _check_ips(client: TestClient, cluster_ids: list[str], ip_ids: list[str]) -> None:
    """Each IP on at most one cluster, and each IP names the cluster that names it."""
    holders = _holders(client, cluster_ids)
    for ip_id in ip_ids:
        on = [cid for cid, held in holders.items() if held == ip_id]
        assert len(on) <= 1, holders
        assert client.get(f"/v1/reserved-ips/{ip_id}").json()["cluster_id"] == (on[0] if on else None)


def _slowed(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, seconds: float = IN_FLIGHT_SECONDS
) -> None:
    """Hold the write open `seconds` after `module.name` ran, as a slow request would (widens the window
    between a service's checks and its writes, where the races are)."""
    original = getattr(module, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        time.sleep(seconds)
        return result

    monkeypatch.setattr(module, name, slow)


class _Pause:
    """Pauses the request that calls a patched function, right after it (its checks done, its writes not
    yet), until the racing request has its answer; at most `LIMIT` seconds (on SQLite the racer waits for
    the paused request's write lock, so it cannot finish first)."""

    LIMIT = 0.5

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.armed = False
        self.reached, self.done = threading.Event(), threading.Event()
        original = getattr(module, name)

        def paused(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if self.armed:
                self.armed = False
                self.reached.set()
                self.done.wait(self.LIMIT)
            return result

        monkeypatch.setattr(module, name, paused)

    def racer(self, call: Call) -> Call:
        """`call`, sent once the paused request got to the pause."""
        self.armed = True
        self.reached.clear()
        self.done.clear()

        def run(client: TestClient) -> Answer:
            assert self.reached.wait(10), "the racing request never got to its pause"
            try:
                return call(client)
            finally:
                self.done.set()

        return run


# Rounds of a delete racing a reference: (pause the reference after its checks until the delete is done,
# seconds the delete starts after the reference). In the first the delete lands between the reference's
# checks and its writes; in the second the reference commits first; the third is left to chance.
ROUNDS = ((True, 0.0), (False, 0.5), (False, 0.0))


# -- moves and deletes ------------------------------------------------------------------------------------

def test_races_parallel_reserved_ip_moves_answer_200_or_409_and_leave_each_ip_on_one_cluster(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = replicas
    admin = _client(one, acme)
    ids = [_cluster(admin, name=f"c{i}")["id"] for i in range(3)]
    first, second = _ip(admin), _ip(admin)
    _slowed(monkeypatch, reserved_ips, "check_reference", 0.1)  # every move checks, then moves
    for _ in range(2):
        _ok(admin.patch(f"/v1/clusters/{ids[0]}", json={"reserved_ip_id": first}), 200)
        _ok(admin.patch(f"/v1/clusters/{ids[1]}", json={"reserved_ip_id": second}), 200)
        # Two clusters take the first IP while its holder lets it go; then the two IPs swap places.
        grabs = _together([(one, _attach(ids[1], first)), (two, _attach(ids[2], first)),
                           (one, _attach(ids[0], None))], acme)
        for response in grabs:
            _ok(response, 200, 409)
        _check_ips(admin, ids, [first, second])
        _ok(admin.patch(f"/v1/clusters/{ids[0]}", json={"reserved_ip_id": first}), 200)
        _ok(admin.patch(f"/v1/clusters/{ids[1]}", json={"reserved_ip_id": second}), 200)
        swaps = _together([(one, _attach(ids[0], second)), (two, _attach(ids[1], first))], acme)
        for response in swaps:
            _ok(response, 200, 409)
        _check_ips(admin, ids, [first, second])
        for cid in ids:
            _ok(admin.patch(f"/v1/clusters/{cid}", json={"reserved_ip_id": None}), 200)


@pytest.mark.parametrize("kind", ["volume", "ssh_key", "security_group"])
def test_races_delete_while_a_cluster_references_it_answers_a_documented_status(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = replicas
    admin = _client(one, acme)
    path, field = {"volume": ("/v1/volumes", "volume_ids"), "ssh_key": ("/v1/ssh-keys", "ssh_key_ids"),
                   "security_group": ("/v1/security-groups", "security_group_ids")}[kind]
    body = {"volume": {"name": "v", "region": "us-east-1", "size_tib": 1},
            "ssh_key": {"name": "k", "public_key": ed25519_key()},
            "security_group": {"name": "g"}}[kind]
    pause = _Pause(monkeypatch, quotas, "admit")  # a create's last step before its writes
    for round_number, (paused, stagger) in enumerate(ROUNDS):
        if kind == "ssh_key":
            body = {"name": "k", "public_key": ed25519_key()}
        ref = admin.post(path, json=body).json()["id"]
        spec = {"name": f"r{round_number}", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
                field: [ref]}
        first, second = (one, two) if round_number % 2 else (two, one)
        remove = _delete(f"{path}/{ref}")
        created, deleted = _together([(first, _post("/v1/clusters", spec)),
                                      (second, pause.racer(remove) if paused else remove)], acme,
                                     stagger=stagger)
        _ok(created, 201, 422)
        _ok(deleted, 204, 409)
        exists = admin.get(f"{path}/{ref}").status_code
        if created.status_code == 201:
            assert deleted.status_code == 409 and exists == 200, deleted.text
            assert created.json()[field] == [ref]
            _ok(admin.patch(f"/v1/clusters/{created.json()['id']}", json={field: []}), 200)
        else:
            assert created.json()["errors"][0]["code"] == "not_found", created.text
            assert deleted.status_code == 204 and exists == 404


def test_races_reserved_ip_released_during_attach_is_on_no_cluster(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = replicas
    admin = _client(one, acme)
    cluster_id = _cluster(admin)["id"]
    pause = _Pause(monkeypatch, reserved_ips, "check_reference")
    for round_number, (paused, stagger) in enumerate(ROUNDS):
        ip_id = _ip(admin)
        first, second = (one, two) if round_number % 2 else (two, one)
        release = _delete(f"/v1/reserved-ips/{ip_id}")
        attached, released = _together(
            [(first, _attach(cluster_id, ip_id)), (second, pause.racer(release) if paused else release)],
            acme, stagger=stagger,
        )
        responses = {"attach": attached, "release": released}
        _ok(responses["attach"], 200, 422)
        _ok(responses["release"], 204, 409)
        held = _holders(admin, [cluster_id])[cluster_id]
        if responses["release"].status_code == 204:
            assert responses["attach"].status_code == 422 and held is None, responses["attach"].text
            assert admin.get(f"/v1/reserved-ips/{ip_id}").status_code == 404
        else:
            assert responses["release"].json()["code"] in ("reserved_ip_attached", "in_use")
            assert responses["attach"].status_code == 200 and held == ip_id
            _ok(admin.patch(f"/v1/clusters/{cluster_id}", json={"reserved_ip_id": None}), 200)


# -- overlapping retries with one Idempotency-Key ------------------------------------------------------------

def _overlapping(replicas: tuple[FastAPI, FastAPI], acme: Tenant, path: str, body: dict[str, Any]) -> list[
    Answer
]:
    send = _post(path, body, headers={"Idempotency-Key": "retry-1"})
    responses = _together([(replicas[0], send), (replicas[1], send)], acme, stagger=IN_FLIGHT_SECONDS / 4)
    for response in responses:
        _ok(response, 201)
    assert responses[0].json() == responses[1].json()
    assert sorted(r.headers.get("idempotent-replayed", "") for r in responses) == ["", "true"]
    return responses


def test_races_overlapping_retry_of_reserve_ip_replays_the_first_answer(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _client(replicas[0], acme)
    cluster_id = _cluster(admin)["id"]
    _slowed(monkeypatch, reserved_ips, "reserve_cluster_address")
    responses = _overlapping(replicas, acme, f"/v1/clusters/{cluster_id}/reserve-ip", {"name": "kept"})
    assert _holders(admin, [cluster_id])[cluster_id] == responses[0].json()["id"]
    assert len(admin.get("/v1/reserved-ips").json()["items"]) == 1


def test_races_overlapping_retry_of_a_reservation_draw_replays_the_first_answer(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _client(replicas[0], acme)
    block = admin.post("/v1/reservations", json={"name": "block", "region": "us-east-1", "duration_days": 1,
                                                 "instance_type": "8xH100", "node_count": 1})
    assert block.status_code == 201, block.text
    _slowed(monkeypatch, clusters, "create_cluster")
    spec = {"name": "drawn", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
            "reservation_id": block.json()["id"]}
    _overlapping(replicas, acme, "/v1/clusters", spec)
    assert len(admin.get("/v1/clusters").json()["items"]) == 1


def test_races_overlapping_retry_of_a_quota_limited_create_replays_the_first_answer(
    replicas: tuple[FastAPI, FastAPI], acme: Tenant, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(settings)
    try:
        with make_session_factory(engine, write=True).begin() as session:
            quotas.set_quota(session=session, project_id=acme.project_id, changes={"max_clusters": 1})
        _slowed(monkeypatch, clusters, "create_cluster")
        spec = {"name": "only", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1}
        _overlapping(replicas, acme, "/v1/clusters", spec)
        with make_session_factory(engine)() as session:
            assert session.scalar(select(func.count()).select_from(Cluster)) == 1
    finally:
        engine.dispose()
