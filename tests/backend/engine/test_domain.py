"""Catalog, cluster rules and the node lifecycle (pure)."""

from __future__ import annotations

import itertools
import json
import re
from decimal import Decimal
from ipaddress import ip_network
from pathlib import Path

import pytest

from backend.domain.catalog import catalog_from_dict, catalog_to_dict, default_catalog
from backend.domain.cluster_rules import apply_cluster_defaults, rules_for, validate_cluster_spec
from backend.domain.lifecycle import (
    CLUSTER_STATUS_PRIORITY,
    TRANSITIONS,
    InvalidTransition,
    NodeStatus,
    check_transition,
    derive_cluster_status,
)
from backend.runtime import build_runtime
from backend.settings import Settings

CATALOG = default_catalog()


def spec(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "train",
        "region": "us-east-1",
        "instance_type": "8xH100",
        "node_count": 2,
    }
    base.update(overrides)
    return base


def codes(s: dict[str, object]) -> set[tuple[str, str]]:
    return {(e.path, e.code) for e in validate_cluster_spec(s, CATALOG)}


def test_catalog_has_every_reference_shape() -> None:
    names = {t.name for t in CATALOG.instance_types}
    assert names >= {"1xH100", "8xH100", "8xH100-EFA", "8xH200", "8xB200"}
    h100 = CATALOG.instance_type("8xH100")
    assert h100 is not None and h100.gpu_memory_mib == 81559 and h100.hca_count == 8
    assert isinstance(h100.on_demand_usd_per_gpu_hour, Decimal)
    assert CATALOG.instance_type("1xH100").fabric_capable is False  # type: ignore[union-attr]
    assert CATALOG.capacity("us-east-1", "ib-east-a", "8xH100") == 256


def test_catalog_reserved_discount_grows_with_term() -> None:
    assert CATALOG.reserved_discount(0) == 0
    assert CATALOG.reserved_discount(7) < CATALOG.reserved_discount(30) < CATALOG.reserved_discount(90)


def test_catalog_file_roundtrip_overrides_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = catalog_to_dict(CATALOG)
    doc["fabrics"][0]["pools"]["8xH100"] = 3
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("GPUCLOUD_CATALOG_FILE", str(path))
    runtime = build_runtime(Settings(database_url="sqlite://"))  # reads the file once, at start
    monkeypatch.delenv("GPUCLOUD_CATALOG_FILE")
    loaded = default_catalog()
    assert runtime.catalog is loaded
    runtime.close()
    assert loaded.capacity("us-east-1", "ib-east-a", "8xH100") == 3
    assert loaded.instance_types == CATALOG.instance_types


def test_catalog_file_rejects_unknown_region() -> None:
    doc = catalog_to_dict(CATALOG)
    doc["fabrics"][0]["region"] = "mars-1"
    with pytest.raises(ValueError, match="unknown region"):
        catalog_from_dict(doc)


def test_catalog_builtin_address_plan_gives_every_region_and_fabric_its_own_blocks() -> None:
    blocks = [ip_network(b) for r in CATALOG.regions for b in (r.private_cidr, r.public_cidr)]
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    for fabric in CATALOG.fabrics:
        block, skip = CATALOG.subnet_block(fabric.region, fabric.name)
        region = CATALOG.region(fabric.region)
        assert region is not None and skip == () and block == fabric.private_cidr
        assert ip_network(block).subnet_of(ip_network(region.private_cidr))
        # Room for a subnet per node: every node could be a cluster of its own.
        assert 2 ** (22 - ip_network(block).prefixlen) >= sum(fabric.pools.values())
    fabric_blocks = [ip_network(f.private_cidr or "") for f in CATALOG.fabrics]
    assert all(not a.overlaps(b) for i, a in enumerate(fabric_blocks) for b in fabric_blocks[i + 1:])


@pytest.mark.parametrize(("edit", "message"), [
    ({"regions": {1: {"private_cidr": "10.0.0.0/8"}}},
     "region us-west-2 private_cidr 10.0.0.0/8 overlaps region us-east-1 private_cidr 10.0.0.0/11"),
    ({"regions": {2: {"public_cidr": "198.18.0.0/15"}}},
     "region eu-north-1 public_cidr 198.18.0.0/15 overlaps"),
    ({"regions": {0: {"public_cidr": "10.64.0.0/24"}}}, "overlaps region us-east-1 public_cidr 10.64.0.0/24"),
    ({"regions": {0: {"private_cidr": "10.0.0.0/24"}}},
     "region us-east-1: private_cidr 10.0.0.0/24 is too small"),
    ({"regions": {0: {"private_cidr": "ten/8"}}}, "region us-east-1: private_cidr 'ten/8' is not an IPv4"),
    ({"fabrics": {1: {"private_cidr": "10.32.0.0/13"}}},
     "fabric efa-east-a: private_cidr 10.32.0.0/13 lies outside region us-east-1's private_cidr"),
    ({"fabrics": {1: {"private_cidr": "10.0.0.0/14"}}},
     "fabric efa-east-a private_cidr 10.0.0.0/14 overlaps fabric ib-east-a private_cidr 10.0.0.0/13"),
])
def test_catalog_file_rejects_an_address_plan_with_overlaps(edit: dict[str, dict[int, dict[str, str]]],
                                                            message: str) -> None:
    doc = catalog_to_dict(CATALOG)
    for section, changes in edit.items():
        for index, fields in changes.items():
            doc[section][index].update(fields)
    with pytest.raises(ValueError, match=re.escape(message)):
        catalog_from_dict(doc)


def test_catalog_fabric_without_own_block_draws_from_the_rest_of_its_region() -> None:
    doc = catalog_to_dict(CATALOG)
    doc["fabrics"][1]["private_cidr"] = None  # efa-east-a
    loaded = catalog_from_dict(doc)
    assert loaded.subnet_block("us-east-1", "efa-east-a") == ("10.0.0.0/11", ("10.0.0.0/13", "10.16.0.0/13"))


def test_rules_accept_a_valid_multi_node_spec_and_fill_defaults() -> None:
    assert validate_cluster_spec(spec(), CATALOG) == []
    full = apply_cluster_defaults(spec(), CATALOG)
    assert full["interconnect"] == "infiniband" and full["orchestrator"] == "slurm"
    single = apply_cluster_defaults(spec(instance_type="1xH100", node_count=1), CATALOG)
    assert single["interconnect"] == "ethernet" and single["orchestrator"] == "none"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"node_count": 0}, ("node_count", "out_of_range")),
        ({"instance_type": "1xH100", "node_count": 2}, ("node_count", "requires_fabric_capable_type")),
        ({"instance_type": "4xA100"}, ("instance_type", "unknown_instance_type")),
        ({"region": "mars-1"}, ("region", "unknown_region")),
        ({"interconnect": "efa"}, ("interconnect", "unsupported_interconnect")),
        ({"instance_type": "8xH100-EFA", "region": "eu-north-1"}, ("instance_type", "not_offered_in_region")),
        ({"orchestrator": "none"}, ("orchestrator", "orchestrator_required")),
        ({"container": "pytorch"}, ("container", "container_requires_single_node")),
        ({"billing": {"type": "reserved"}}, ("billing.duration_days", "required")),
        ({"billing": {"type": "reserved", "duration_days": 91}}, ("billing.duration_days", "out_of_range")),
        ({"billing": {"type": "on_demand", "duration_days": 7}}, ("billing.duration_days", "not_allowed")),
        ({"name": "Bad_Name"}, ("name", "invalid_name")),
    ],
)
def test_rules_name_the_offending_field(overrides: dict[str, object], expected: tuple[str, str]) -> None:
    assert expected in codes(spec(**overrides))


def test_rules_report_every_violation_at_once() -> None:
    found = codes(
        spec(
            node_count=3,
            orchestrator="none",
            container="base",
            billing={"type": "reserved", "duration_days": 0},
        )
    )
    assert {"orchestrator", "container", "billing.duration_days"} <= {path for path, _ in found}


def test_rules_allow_single_node_container_and_kubernetes() -> None:
    assert codes(spec(instance_type="1xH100", node_count=1, container="pytorch")) == set()
    assert codes(spec(node_count=1, orchestrator="kubernetes")) == set()
    assert codes(spec(billing={"type": "reserved", "duration_days": 90})) == set()


def test_rules_are_published_per_instance_type() -> None:
    assert rules_for("1xH100", CATALOG)["multi_node"] is False
    assert rules_for("8xH200", CATALOG)["orchestrators_multi_node"] == ["slurm", "kubernetes"]


def test_lifecycle_happy_path_and_day2_edges() -> None:
    path = [
        NodeStatus.PENDING,
        NodeStatus.PROVISIONING,
        NodeStatus.CONFIGURING,
        NodeStatus.CONTAINER_CREATING,
        NodeStatus.RUNNING,
        NodeStatus.CONFIGURING,
        NodeStatus.RUNNING,
        NodeStatus.CONTAINER_CREATING,
        NodeStatus.RUNNING,
        NodeStatus.DESTROYING,
        NodeStatus.DESTROYED,
    ]
    for current, target in itertools.pairwise(path):
        check_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (NodeStatus.DESTROYED, NodeStatus.RUNNING),
        (NodeStatus.PENDING, NodeStatus.RUNNING),
        (NodeStatus.FAILED, NodeStatus.RUNNING),
        (NodeStatus.DESTROYING, NodeStatus.RUNNING),
    ],
)
def test_lifecycle_refuses_impossible_transitions(current: NodeStatus, target: NodeStatus) -> None:
    with pytest.raises(InvalidTransition):
        check_transition(current, target)


def test_lifecycle_every_status_can_reach_destroyed() -> None:
    for status in NodeStatus:
        seen, frontier = {status}, [status]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert NodeStatus.DESTROYED in seen


def test_cluster_status_follows_the_priority_rule() -> None:
    assert CLUSTER_STATUS_PRIORITY[0] == NodeStatus.FAILED
    assert derive_cluster_status(["RUNNING", "FAILED", "DESTROYING"]) == NodeStatus.FAILED
    assert derive_cluster_status(["RUNNING", "PENDING", "CONFIGURING"]) == NodeStatus.PENDING
    assert derive_cluster_status(["RUNNING", "CONTAINER_CREATING"]) == NodeStatus.CONTAINER_CREATING
    assert derive_cluster_status(["RUNNING", "DESTROYED"]) == NodeStatus.RUNNING
    assert derive_cluster_status([]) == NodeStatus.PENDING
    assert derive_cluster_status([], empty=NodeStatus.DESTROYED) == NodeStatus.DESTROYED


def test_rules_unsupported_interconnect_names_the_type_that_has_it_and_where() -> None:
    found = validate_cluster_spec(spec(interconnect="efa"), CATALOG)
    [error] = [e for e in found if e.path == "interconnect"]
    assert error.message == (
        "8xH100 supports infiniband, not efa; for EFA use instance_type 8xH100-EFA (offered in us-east-1)"
    )
