"""The Slurm configuration a cluster declares (`slurm_config`): the API's rules (422 naming the field),
create and PATCH, the slurm.conf lines it becomes (parsed by Debian's `scontrol`), and the engine carrying
a change to running nodes in place (RUNNING -> CONFIGURING -> RUNNING, same machines)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.fabric import slurm
from backend.provisioning.node_config.accounting import qos_script
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode
from tests.backend.engine.conftest import create, drain, get
from tests.backend.engine.test_engine_day2 import statuses_of
from tests.backend.engine.test_fabric import layout, scontrol

DEBUG = {"name": "debug", "max_time_minutes": 30, "default_time_minutes": 10}
URGENT = {"name": "urgent", "priority": 1000}


def _errors(response: Any) -> list[tuple[str, str]]:
    assert response.status_code == 422, response.text
    return [(e["field"], e["code"]) for e in response.json()["errors"]]


def _volume(admin: TestClient) -> str:
    created = admin.post("/v1/volumes", json={"name": "data", "region": "us-east-1", "size_tib": 1})
    assert created.status_code in (200, 201), created.text
    volume_id: str = created.json()["id"]
    return volume_id


def test_slurm_config_is_stored_with_defaults_and_replaced_by_patch(admin: TestClient) -> None:
    cluster = create(admin, slurm_config={"partitions": [DEBUG], "qos": [URGENT]})
    assert cluster["slurm_config"] == {
        "partitions": [{**DEBUG, "default": False}],
        "qos": [{**URGENT, "max_wall_minutes": None}],
        "prolog": None, "epilog": None,
    }
    assert get(admin, cluster["id"])["slurm_config"] == cluster["slurm_config"]
    volume = _volume(admin)
    changed = admin.patch(f"/v1/clusters/{cluster['id']}", json={
        "volume_ids": [volume],
        "slurm_config": {"partitions": [DEBUG, {"name": "long", "max_time_minutes": 43200, "default": True}],
                         "prolog": f"/mnt/shared/{volume}/hooks/prolog.sh"},
    })
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert [p["name"] for p in body["slurm_config"]["partitions"]] == ["debug", "long"]
    assert body["slurm_config"]["qos"] == []  # replaced whole
    assert body["slurm_config"]["prolog"] == f"/mnt/shared/{volume}/hooks/prolog.sh"
    # The artifact is the cluster's slurm.conf with them.
    conf = admin.get(f"/v1/clusters/{cluster['id']}/artifacts/slurm.conf").text
    assert f"Prolog=/mnt/shared/{volume}/hooks/prolog.sh" in conf.splitlines()
    assert "PartitionName=long Nodes=train-[0-1] Default=YES DefaultTime=01:00:00 MaxTime=30-00:00:00" in conf
    # Detaching the volume the prolog is on is refused, naming the prolog.
    detach = admin.delete(f"/v1/clusters/{cluster['id']}/volumes/{volume}")
    assert ("slurm_config.prolog", "not_on_attached_volume") in _errors(detach)
    cleared = admin.patch(f"/v1/clusters/{cluster['id']}", json={"slurm_config": None})
    assert cleared.status_code == 200 and cleared.json()["slurm_config"] is None


@pytest.mark.parametrize(("config", "overrides", "expected"), [
    ({"partitions": [{"name": "gpu"}]}, {}, ("slurm_config.partitions[0].name", "reserved_name")),
    ({"partitions": [DEBUG, DEBUG]}, {}, ("slurm_config.partitions[1].name", "duplicate_name")),
    ({"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]}, {},
     ("slurm_config.partitions[1].default", "multiple_defaults")),
    ({"partitions": [{"name": "a", "max_time_minutes": 30, "default_time_minutes": 31}]}, {},
     ("slurm_config.partitions[0].default_time_minutes", "above_max_time")),
    ({"partitions": [{"name": "Debug!"}]}, {}, ("slurm_config.partitions[0].name", "invalid_format")),
    ({"partitions": [{"name": "a", "max_time_minutes": 0}]}, {},
     ("slurm_config.partitions[0].max_time_minutes", "out_of_range")),
    ({"qos": [{"name": "normal"}]}, {}, ("slurm_config.qos[0].name", "reserved_name")),
    ({"qos": [URGENT, URGENT]}, {}, ("slurm_config.qos[1].name", "duplicate_name")),
    ({"qos": [{"name": "q", "priority": -1}]}, {}, ("slurm_config.qos[0].priority", "out_of_range")),
    ({"prolog": "/mnt/shared/vol_0abc/prolog.sh"}, {}, ("slurm_config.prolog", "not_on_attached_volume")),
    ({"epilog": "/etc/slurm/epilog.sh"}, {}, ("slurm_config.epilog", "invalid_format")),
    ({"epilog": "/mnt/shared/vol_0abc/../x.sh"}, {}, ("slurm_config.epilog", "invalid_path")),
    ({"qos": [URGENT]}, {"node_count": 1, "orchestrator": "none"}, ("slurm_config", "requires_slurm")),
])
def test_slurm_config_rules_name_the_field(
    admin: TestClient, config: dict[str, Any], overrides: dict[str, Any], expected: tuple[str, str]
) -> None:
    body = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
            "slurm_config": config, **overrides}
    errors = _errors(admin.post("/v1/clusters", json=body))
    assert expected[0] in [field for field, _ in errors], errors
    if expected[1] not in ("invalid_format", "out_of_range"):  # the schema's own codes
        assert expected in errors, errors


def test_slurm_conf_lines_of_the_declared_config(tmp_path: Path) -> None:
    config = {"partitions": [{**DEBUG, "default": False}, {"name": "long", "max_time_minutes": 43200,
                                                          "default_time_minutes": 1500, "default": True}],
              "qos": [URGENT], "prolog": "/mnt/shared/vol_1/p.sh", "epilog": "/mnt/shared/vol_1/e.sh"}
    cluster = layout(2)
    conf = slurm.slurm_conf(cluster, config=config)
    lines = conf.splitlines()
    per_gpu = "DefCpuPerGPU=26 DefMemPerCPU=8418 DefMemPerGPU=218880 OverSubscribe=NO State=UP"
    assert [line for line in lines if line.startswith("PartitionName=")] == [
        f"PartitionName=gpu Nodes=train-[0-1] Default=NO DefaultTime=01:00:00 MaxTime=7-00:00:00 {per_gpu}",
        f"PartitionName=debug Nodes=train-[0-1] Default=NO DefaultTime=00:10:00 MaxTime=00:30:00 {per_gpu}",
        "PartitionName=long Nodes=train-[0-1] Default=YES DefaultTime=1-01:00:00 MaxTime=30-00:00:00 "
        + per_gpu,
    ]
    assert "Prolog=/mnt/shared/vol_1/p.sh" in lines and "Epilog=/mnt/shared/vol_1/e.sh" in lines
    # Without a declared default, gpu stays the default; without a config, the file is as before.
    assert "PartitionName=gpu Nodes=train-[0-1] Default=YES" in slurm.slurm_conf(cluster, config={
        "partitions": [{**DEBUG, "default": False}]})
    assert slurm.slurm_conf(cluster, config=None) == slurm.slurm_conf(cluster)
    # A partition or script change needs no slurmctld restart (reconfigure); a node change does.
    assert slurm.restart_part(conf) == slurm.restart_part(slurm.slurm_conf(cluster))
    assert slurm.restart_part(slurm.slurm_conf(layout(3))) != slurm.restart_part(conf)
    # Debian's Slurm 22.05 reads the file: the partitions are there with their limits.
    (tmp_path / "slurm.conf").write_text(conf)
    for name in ("gres.conf", "topology.conf", "cgroup.conf"):
        (tmp_path / name).write_text(getattr(slurm, name.replace(".", "_"))(cluster))
    assert "train-[0-1]" in scontrol(tmp_path, "show", "hostlist", "train-0,train-1")


def test_qos_script_makes_declared_qos_and_allows_them_to_the_user() -> None:
    script = qos_script("acct", "ubuntu", [{"name": "urgent", "priority": 1000, "max_wall_minutes": None},
                                           {"name": "short", "priority": 10, "max_wall_minutes": 30}])
    assert "sacctmgr -i add qos urgent" in script
    assert "sacctmgr -i modify qos where name=urgent set Priority=1000 MaxWall=-1" in script
    assert "sacctmgr -i modify qos where name=short set Priority=10 MaxWall=30" in script
    assert "sacctmgr -i modify user where name=ubuntu cluster=acct set QOS+=urgent,short" in script
    assert script != qos_script("acct", "ubuntu", [])  # another digest: applied again when it changes


def _slurm_configs(sessions: sessionmaker[Session]) -> list[Any]:
    with sessions() as session:
        nodes = session.scalars(select(EngineNode).where(EngineNode.active_name.is_not(None))).all()
        return [node.applied_config.get("slurm_config") for node in nodes]


def test_engine_carries_a_slurm_config_change_to_running_nodes_in_place(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, slurm_config={"partitions": [DEBUG]})
    worker = make_worker()
    drain(worker)
    declared = get(admin, cluster["id"])["slurm_config"]
    assert _slurm_configs(sessions) == [declared, declared]
    assert get(admin, cluster["id"])["slurm"]["partitions"] == ["gpu", "debug"]
    changed = admin.patch(f"/v1/clusters/{cluster['id']}",
                          json={"slurm_config": {"partitions": [DEBUG, {"name": "long"}], "qos": [URGENT]}})
    assert changed.status_code == 200, changed.text
    drain(worker)
    assert statuses_of(sessions, "train-0")[-3:] == ["RUNNING", "CONFIGURING", "RUNNING"]
    now = get(admin, cluster["id"])
    assert now["status"] == "RUNNING" and now["slurm"]["partitions"] == ["gpu", "debug", "long"]
    assert _slurm_configs(sessions) == [now["slurm_config"]] * 2
    with sessions() as session:  # the same machines: reconfigured, not replaced
        assert all(n.attempt == 1 for n in session.scalars(select(EngineNode)))
