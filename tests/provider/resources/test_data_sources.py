from decimal import Decimal

import httpx
import pytest

from provider.framework import DiagnosticError
from provider.resources.data_sources import InstanceTypesDataSource, SharedVolumeDataSource, SshKeyDataSource
from tests.provider.resources.fakes import context

REGIONS = {
    "items": [
        {
            "name": "us-east-1",
            "display_name": "East",
            "interconnects": ["infiniband"],
            "fabrics": [],
            "storage_usd_per_tib_hour": "0.1122",
        },
        {
            "name": "eu-north-1",
            "display_name": "North",
            "interconnects": [],
            "fabrics": [],
            "storage_usd_per_tib_hour": "0.1122",
        },
    ]
}


def itype(name, model, gpus, availability):
    return {
        "name": name,
        "gpu_model": model,
        "gpu_count": gpus,
        "gpu_memory_mib": 1,
        "vcpu": 2,
        "ram_gib": 3,
        "local_nvme": "x",
        "network": "y",
        "interconnects": ["infiniband"],
        "fabric_capable": gpus > 1,
        "on_demand_usd_per_gpu_hour": "3.99",
        "on_demand_usd_per_node_hour": "31.92",
        "reserved": [{"min_duration_days": 30, "discount": "0.25", "usd_per_gpu_hour": "2.99"}],
        "rules": {},
        "availability": availability,
    }


def avail(region, free):
    return {
        "region": region,
        "fabric": f"f-{region}",
        "interconnect": "infiniband",
        "capacity_nodes": 10,
        "available_nodes": free,
    }


TYPES = {
    "items": [
        itype("1xH100", "H100 SXM 80GB", 1, [avail("us-east-1", 5)]),
        itype("8xH100", "H100 SXM 80GB", 8, [avail("us-east-1", 3), avail("eu-north-1", 7)]),
        itype("8xB200", "B200 180GB", 8, [avail("eu-north-1", 2)]),
    ]
}


def api(request):
    return httpx.Response(200, json=REGIONS if request.url.path == "/v1/regions" else TYPES)


def config(**values):
    return {"region": None, "gpu": None, "min_gpus": None, "instance_types": None, **values}


def test_instance_types_filters_and_sums_capacity_of_the_region():
    state = InstanceTypesDataSource().read(context(api), config(region="us-east-1", gpu="h100", min_gpus=8))
    (only,) = state["instance_types"]
    assert only["name"] == "8xH100" and only["available_nodes"] == 3
    assert [a["region"] for a in only["availability"]] == ["us-east-1"]
    assert only["on_demand_usd_per_gpu_hour"] == Decimal("3.99")
    assert only["reserved"] == [
        {"min_duration_days": 30, "discount": Decimal("0.25"), "usd_per_gpu_hour": Decimal("2.99")}
    ]


def test_instance_types_without_filters_lists_everything():
    state = InstanceTypesDataSource().read(context(api), config())
    assert [t["name"] for t in state["instance_types"]] == ["1xH100", "8xH100", "8xB200"]
    assert state["instance_types"][1]["available_nodes"] == 10


def test_instance_types_unknown_region_names_the_attribute():
    with pytest.raises(DiagnosticError) as raised:
        InstanceTypesDataSource().read(context(api), config(region="mars"))
    assert raised.value.diagnostic.path[0].name == "region"


def test_lookup_needs_exactly_one_of_id_and_name():
    source = SshKeyDataSource()
    ctx = context(api)
    source.validate_config(ctx, {"id": "a", "name": "b"})
    source.validate_config(ctx, {"id": None, "name": None})
    assert [d.path[0].name for d in ctx.diagnostics] == ["name", "id"]


def test_lookup_by_name_must_match_one():
    def handler(request):
        return httpx.Response(
            200, json={"items": [{"id": "vol_1"}, {"id": "vol_2"}], "next_page_token": None}
        )

    with pytest.raises(DiagnosticError) as raised:
        SharedVolumeDataSource().read(context(handler), {"id": None, "name": "data"})
    diag = raised.value.diagnostic
    assert "2 shared volumes" in diag.detail and "vol_1, vol_2" in diag.detail and diag.path[0].name == "name"


def test_lookup_schemas_mirror_the_resources_as_computed():
    attrs = SharedVolumeDataSource.schema.attributes
    assert attrs["id"].optional and attrs["name"].optional and attrs["size_tib"].computed
    assert not any(a.required for a in attrs.values())
