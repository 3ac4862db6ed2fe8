"""The local driver's contract with the engine and the API, without starting nodes: what is refused at
admission, where login points, how the health watch is polled, and the host checks of `serve` and
`doctor`. (Real nodes: test_local_nodes.py here, and acceptance/test_acc_local_driver.py.)"""

from __future__ import annotations

import datetime as dt
import ipaddress
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend import cli
from backend.domain.clock import SYSTEM_CLOCK, utcnow
from backend.provisioning.driver import Operation, OperationRequest, OpKind
from backend.provisioning.drivers import local as local_driver
from backend.provisioning.drivers.background import Result
from backend.provisioning.drivers.local import preflight
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import LocalHostError
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, clock, create, drain, get, make_worker, sessions

__all__ = ["clock", "make_worker", "sessions"]  # fixtures of the engine tests, used here


@pytest.fixture
def local_driver_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GPUCLOUD_DRIVER", "local")
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    yield


@pytest.mark.usefixtures("local_driver_env")
def test_admission_and_catalog_refuse_kubernetes_naming_the_local_driver(admin: TestClient) -> None:
    response = admin.post("/v1/clusters", json={"name": "kube", "region": "us-east-1",
                                                 "instance_type": "8xH100", "node_count": 2,
                                                 "orchestrator": "kubernetes"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert "local provisioning driver" in response.text and "kubernetes" in response.text
    assert body["field"] == "orchestrator" and body["code"] == "unsupported_by_driver"
    assert admin.get("/v1/clusters").json()["items"] == []  # nothing stored
    assert create(admin, orchestrator="slurm")["status"] == "PENDING"
    # Plan time: the catalog's rules say which orchestrators the driver runs (the provider checks them).
    h100 = next(t for t in admin.get("/v1/instance-types").json()["items"] if t["name"] == "8xH100")
    assert h100["rules"]["orchestrators_multi_node"] == ["slurm"]
    assert h100["rules"]["orchestrators_single_node"] == ["slurm", "none"]


@pytest.mark.usefixtures("local_driver_env")
def test_login_is_the_controllers_private_address_under_the_local_driver(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker(driver="simulated"))  # modelled nodes: only the reported address differs
    body = get(admin, cluster["id"])
    jumphost = str(ipaddress.ip_network(body["fabric"]["subnet"]).network_address + 4)
    assert body["login"]["public_ip"] == jumphost
    assert body["login"]["ssh_command"] == f"ssh ubuntu@{jumphost}"


class _WatchedDatacenter(SimulatedDatacenter):
    """The simulated datacenter with a health watch read from the node, as the local driver's."""

    def __init__(self) -> None:
        super().__init__(EngineSettings.model_validate(FAST))
        self.broken = False
        self.reads = 0

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        if request.kind == OpKind.HEALTH_WATCH:
            return Operation(request.client_token, request.kind, now, now + dt.timedelta(seconds=0.05), True)
        return super().submit(session, request, now)

    def get(self, session: Session, client_token: str) -> Operation | None:
        if "/health_watch/" not in client_token:
            return super().get(session, client_token)
        self.reads += 1
        now = dt.datetime.now(dt.UTC)
        if self.broken:
            return Operation(client_token, OpKind.HEALTH_WATCH, now, now, False, "slurmd is not running")
        return Operation(client_token, OpKind.HEALTH_WATCH, now, now + dt.timedelta(seconds=0.05), True)


def test_health_watch_is_read_again_when_the_driver_says_when(
    admin: TestClient, sessions: sessionmaker[Session]
) -> None:
    driver = _WatchedDatacenter()
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    # Manual repair: the failed node stays as the watch found it (auto would replace it in the same pass).
    cluster = create(admin, node_count=1, orchestrator="none", instance_type="1xH100", node_repair="manual")
    deadline = time.monotonic() + 20  # never idle: a watched node is always due again soon
    while get(admin, cluster["id"])["status"] != "RUNNING":
        assert time.monotonic() < deadline
        worker.run_once()
    reads = driver.reads
    for _ in range(3):  # a healthy node is read again and again (it used to be read once, then never)
        time.sleep(0.06)
        worker.run_once()
    assert driver.reads >= reads + 3
    driver.broken = True
    time.sleep(0.06)
    worker.run_once()
    node = get(admin, cluster["id"])["nodes"][0]
    assert node["status"] == "FAILED" and "slurmd is not running" in node["status_reason"]


def test_conflicting_route_is_named_and_own_bridges_are_not() -> None:
    routes = [("10.0.4.0/22", "10.0.4.0/22 dev gpcb1234abcd proto kernel scope link src 10.0.4.1"),
              ("192.0.2.0/24", "192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2"),
              ("10.8.0.0/16", "10.8.0.0/16 via 192.0.2.1 dev eth0")]
    assert preflight.conflicting_route("10.0.0.0/8", routes) == "10.8.0.0/16 via 192.0.2.1 dev eth0"
    assert preflight.conflicting_route("10.0.4.0/22", routes) is None
    assert preflight.conflicting_route("172.16.0.0/12", routes) is None
    # Another cluster's bridge on the same subnet (another backend's, or a leftover) is a conflict.
    assert preflight.conflicting_route("10.0.4.0/22", routes, own_bridge="gpcb99999999") == routes[0][1]


def test_serve_refuses_the_local_driver_without_its_packages_in_one_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCLOUD_DRIVER", "local")
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    monkeypatch.setattr(preflight, "_SBIN", ())
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert cli.main(["serve"]) == 1
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert "needs root" in message
    assert ("apt-get install -y --no-install-recommends iproute2 mariadb-server munge nftables "
            "openssh-client openssh-server passwd procps slurm-client slurmctld slurmd slurmdbd sudo "
            "util-linux") in message
    assert not (tmp_path / "gpucloud.db").exists()  # refused before touching anything

    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "simulated: ok" in out and "local (configured: GPUCLOUD_DRIVER): cannot run here" in out


def test_local_driver_runs_work_in_the_background_and_answers_polls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    driver = LocalDriver(tmp_path, check_host=False)
    release = threading.Event()

    def work(kind: OpKind, plan: object, node: object, *images: object) -> Callable[[], Result]:
        def run() -> Result:
            release.wait(5)
            if kind == OpKind.NODE_RELEASE:
                raise LocalHostError("ip netns del exited 1: busy")
            return Result(host_key="ssh-ed25519 AAAAC3Nza" if kind == OpKind.NODE_BOOT else None)

        return run

    monkeypatch.setattr(driver, "plan", lambda session, cluster_id: None)
    monkeypatch.setattr(driver, "_work", work)
    no_session: Any = None  # the plan (what reads the database) is patched out
    now = dt.datetime.now(dt.UTC)
    boot = OperationRequest("n1/booting/1", OpKind.NODE_BOOT, "train", "train-0", cluster_id="c1")
    first = driver.submit(no_session, boot, now)
    assert not first.done(now) and first.ready_at is not None and first.ready_at > now  # look again soon
    assert driver.submit(no_session, boot, now).submitted_at == first.submitted_at  # the same operation
    release.set()
    deadline = time.monotonic() + 5
    while not (op := driver.submit(no_session, boot, utcnow())).done(utcnow()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert op.succeeded and op.host_key == "ssh-ed25519 AAAAC3Nza"  # reported for the API to publish
    release_op = OperationRequest("n1/releasing/2", OpKind.NODE_RELEASE, "train", "train-0", cluster_id="c1")
    driver.submit(no_session, release_op, now)
    deadline = time.monotonic() + 5
    while (failed := driver.get(no_session, "n1/releasing/2")) is None or not failed.done(utcnow()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not failed.succeeded and failed.reason == "LocalHostError: ip netns del exited 1: busy"
    # Steps with nothing to do on one machine are done at once, without a thread.
    fabric = OperationRequest("n1/fabric/3", OpKind.FABRIC_JOIN, "train", "train-0", cluster_id="c1")
    assert driver.submit(no_session, fabric, now).done(now)


def test_fault_command_needs_the_local_driver(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCLOUD_DRIVER", "simulated")
    assert cli.main(["fault", "--cluster", "cls_x", "--node", "train-0", "crash"]) == 2
    assert "needs GPUCLOUD_DRIVER=local" in capsys.readouterr().err


@pytest.mark.usefixtures("local_driver_env")
def test_local_address_range_replaces_the_regions_blocks_in_one_pool(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", "172.31.0.0/16")
    use(EngineSettings())
    east = get(admin, create(admin, name="east")["id"])
    west = get(admin, create(admin, name="west", region="us-west-2", instance_type="8xB200")["id"])
    # Every region draws from the one range: this machine has one routing table.
    assert [east["fabric"]["subnet"], west["fabric"]["subnet"]] == ["172.31.0.0/22", "172.31.4.0/22"]
    assert preflight.address_ranges() == ["172.31.0.0/16"]
    for bad in ("172.31.0.0/24", "not-a-network"):
        monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", bad)
        with pytest.raises(ValueError, match="local_address_range"):
            EngineSettings()


def test_the_operators_registry_ca_directory_reaches_the_image_imports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(preflight, "host_problems", lambda ranges: [])  # the host's fitness is not tested
    built = local_driver.build(EngineSettings(registry_ca_dir=tmp_path / "ca"), tmp_path, SYSTEM_CLOCK)
    assert isinstance(built, LocalDriver) and built.registries.ca_dir == tmp_path / "ca"
    assert LocalDriver(tmp_path, check_host=False).registries.ca_dir is None  # the system's CAs only
