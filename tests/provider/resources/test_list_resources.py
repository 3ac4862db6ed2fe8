"""The list resources of `terraform query`: filters over every page of the API's listing, identities,
states only when asked for, and API errors as diagnostics."""

import httpx

from provider.resources.list_resources import (
    GpuClusterListResource,
    SharedVolumeListResource,
    SshKeyListResource,
    matches,
)
from tests.provider.resources.fakes import context, problem

VOLUMES = [
    {"id": f"vol_{n}", "name": name, "region": region, "size_tib": 1, "status": "available",
     "mount_path": f"/mnt/shared/vol_{n}", "attached_cluster_ids": [], "estimated_hourly_cost_usd": 0.1122,
     "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}
    for n, (name, region) in enumerate(
        [("train-data", "us-east-1"), ("train-eu", "eu-north-1"), ("scratch", "us-east-1")], start=1
    )
]


def paged(items, seen):
    """The API's listing, two items a page (the provider must follow the page tokens)."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        start = int(request.url.params.get("page_token") or 0)
        more = start + 2 < len(items)
        return httpx.Response(
            200, json={"items": items[start:start + 2], "next_page_token": str(start + 2) if more else None}
        )

    return handler


def test_list_volumes_filters_every_page_and_names_results_by_id():
    seen: list[str] = []
    ctx = context(paged(VOLUMES, seen))
    config = {"region": "us-east-1", "name_prefix": "train"}
    (found,) = SharedVolumeListResource().list(ctx, config, include_state=False)
    assert (found.identity, found.display_name, found.state) == ({"id": "vol_1"}, "train-data", None)
    assert len(seen) == 2 and not ctx.diagnostics

    everything = list(SharedVolumeListResource().list(ctx, {"region": None, "name_prefix": None},
                                                      include_state=True))
    assert [r.identity["id"] for r in everything] == ["vol_1", "vol_2", "vol_3"]
    assert everything[0].state["mount_path"] == "/mnt/shared/vol_1"
    assert everything[0].state["size_tib"] == 1


def test_list_clusters_by_labels_and_status_skips_clusters_being_deleted():
    def cluster(n, status, labels, deleting=None):
        return {"id": f"cls_{n}", "name": f"c{n}", "region": "us-east-1", "status": status,
                "labels": labels, "deletion_requested_at": deleting}

    clusters = [
        cluster(1, "RUNNING", {"team": "ml", "env": "prod"}),
        cluster(2, "RUNNING", {"team": "ml"}, deleting="2026-01-01T00:00:00Z"),
        cluster(3, "FAILED", {"team": "ml"}),
        cluster(4, "RUNNING", {"team": "web"}),
    ]
    config = {"labels": {"team": "ml"}, "status": None, "region": None, "name_prefix": None}
    assert [c["id"] for c in clusters if matches(c, config)] == ["cls_1", "cls_3"]
    assert [c["id"] for c in clusters if matches(c, {**config, "status": "RUNNING"})] == ["cls_1", "cls_2"]
    assert [c["id"] for c in clusters if matches(c, {**config, "labels": {"team": "ml", "env": "prod"}})] == [
        "cls_1"
    ]


def test_list_ssh_keys_reports_api_errors_as_diagnostics():
    ctx = context(lambda request: problem(403, "forbidden", "This key may not list SSH keys."))
    assert list(SshKeyListResource().list(ctx, {"name_prefix": None}, include_state=False)) == []
    (error,) = ctx.diagnostics
    assert error.severity == "error" and error.summary == "Error Listing SSH Keys"


def test_list_cluster_status_filter_is_validated():
    from provider.framework.diagnostics import Diagnostics
    from provider.framework.validate import validate_config

    diagnostics = Diagnostics()
    schema = GpuClusterListResource.schema
    validate_config(schema, {"region": None, "name_prefix": None, "labels": None, "status": "running"},
                    diagnostics)
    (error,) = diagnostics
    assert error.path is not None and "RUNNING" in error.detail
