"""`slurm_config` of gpucloud_gpu_cluster: its schema, the API's rules at plan time naming the attribute,
the API body it becomes and the state it is read back as, and an in-place change that re-plans `slurm`."""

from __future__ import annotations

from typing import Any

import pytest

from provider.cty import is_unknown
from provider.resources.gpu_cluster import ENGINE_WORK, PATCHABLE
from provider.resources.gpu_cluster_schema import CLUSTER_SCHEMA, cluster_state, spec_from_plan
from tests.provider.resources.test_gpu_cluster_plan import BASE, errors, plan, state_of

SLURM = {**BASE, "node_count": 2}
VOLUME = "vol_0abc"


def test_slurm_config_schema_is_an_optional_nested_attribute_changed_in_place() -> None:
    attribute = CLUSTER_SCHEMA.attributes["slurm_config"]
    assert attribute.optional and not attribute.computed
    assert set(attribute.attributes) == {"partitions", "qos", "prolog", "epilog"}  # type: ignore[attr-defined]
    assert "slurm_config" in PATCHABLE and "slurm_config" in ENGINE_WORK
    assert "slurm" in CLUSTER_SCHEMA.attributes  # the computed description of the cluster's Slurm stays


def test_slurm_config_plans_defaults_and_becomes_the_api_body() -> None:
    config = {"partitions": [{"name": "debug", "max_time_minutes": 30, "default_time_minutes": 5}],
              "qos": [{"name": "urgent", "priority": 1000, "max_wall_minutes": None}],
              "prolog": f"/mnt/shared/{VOLUME}/prolog.sh"}
    planned, ctx = plan({**SLURM, "shared_volume_ids": [VOLUME], "slurm_config": config})
    assert errors(ctx) == {}
    assert planned is not None
    block = planned["slurm_config"]
    assert block["partitions"] == [{"name": "debug", "max_time_minutes": 30, "default_time_minutes": 5,
                                    "default": False}]
    assert block["qos"] == [{"name": "urgent", "priority": 1000, "max_wall_minutes": None}]
    body = spec_from_plan(planned)
    assert body["slurm_config"] == {
        "partitions": [
            {"name": "debug", "max_time_minutes": 30, "default_time_minutes": 5, "default": False}
        ],
        "qos": [{"name": "urgent", "priority": 1000}], "prolog": f"/mnt/shared/{VOLUME}/prolog.sh",
    }


@pytest.mark.parametrize(("config", "extra", "path", "summary"), [
    ({"partitions": [{"name": "gpu"}]}, {}, "slurm_config.partitions[0].name", "Reserved Slurm Name"),
    ({"qos": [{"name": "normal"}]}, {}, "slurm_config.qos[0].name", "Reserved Slurm Name"),
    ({"qos": [{"name": "a"}, {"name": "a"}]}, {}, "slurm_config.qos[1].name", "Duplicate Slurm Name"),
    ({"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]}, {},
     "slurm_config.partitions[1].default", "More Than One Default Partition"),
    ({"partitions": [{"name": "a", "max_time_minutes": 30}]}, {},  # default_time_minutes 60 by default
     "slurm_config.partitions[0].default_time_minutes", "Default Time Above Maximum"),
    ({"partitions": [{"name": "Debug"}]}, {}, "slurm_config.partitions[0].name", ""),
    ({"partitions": [{"name": "a", "max_time_minutes": 0}]}, {},
     "slurm_config.partitions[0].max_time_minutes", ""),
    ({"prolog": "/etc/prolog.sh"}, {}, "slurm_config.prolog", ""),
    ({"prolog": f"/mnt/shared/{VOLUME}/p.sh"}, {}, "slurm_config.prolog", "Script Not On An Attached Volume"),
    ({"epilog": f"/mnt/shared/{VOLUME}/../p.sh"}, {"shared_volume_ids": [VOLUME]}, "slurm_config.epilog",
     "Invalid Script Path"),
    ({"qos": [{"name": "urgent"}]}, {"node_count": 1}, "slurm_config", "Slurm Configuration Needs Slurm"),
    ({"qos": [{"name": "urgent"}]}, {"orchestrator": "kubernetes"}, "slurm_config",
     "Slurm Configuration Needs Slurm"),
])
def test_slurm_config_rules_are_plan_time_errors_at_the_attribute(
    config: dict[str, Any], extra: dict[str, Any], path: str, summary: str
) -> None:
    _, ctx = plan({**SLURM, **extra, "slurm_config": config})
    found = errors(ctx)
    assert path in found, found
    assert found[path].startswith(summary), found


def test_slurm_config_unknown_values_are_not_rejected() -> None:
    from provider.cty import UNKNOWN

    _, ctx = plan({**SLURM, "shared_volume_ids": UNKNOWN,
                   "slurm_config": {"prolog": f"/mnt/shared/{VOLUME}/p.sh", "partitions": UNKNOWN}})
    assert errors(ctx) == {}


def test_slurm_config_read_back_keeps_left_out_lists_null_and_replans_slurm_when_changed() -> None:
    body = {"id": "cls_1", "name": "train", "node_count": 2, "orchestrator": "slurm",
            "slurm_config": {"partitions": [], "qos": [{"name": "urgent", "priority": 0,
                                                        "max_wall_minutes": None}],
                             "prolog": None, "epilog": None}}
    prior = {"slurm_config": {"partitions": None, "qos": [{"name": "urgent"}]}}
    state = cluster_state(body, prior, None)
    assert state["slurm_config"] == {"partitions": None, "qos": [{"name": "urgent", "priority": 0,
                                                                  "max_wall_minutes": None}],
                                     "prolog": None, "epilog": None}
    assert cluster_state({**body, "slurm_config": None}, prior, None)["slurm_config"] is None
    # A running cluster: a new partition re-plans `slurm` (its partitions list it), not its nodes.
    running = state_of(node_count=2, slurm={"controller": "train-jumphost", "partitions": ["gpu"]}, nodes=[],
                       slurm_config=None)
    planned, ctx = plan({**SLURM, "slurm_config": {"partitions": [{"name": "debug"}]}}, running)
    assert errors(ctx) == {} and planned is not None
    assert is_unknown(planned["slurm"]) and planned["nodes"] == []
