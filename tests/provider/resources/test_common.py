import threading
from decimal import Decimal

import httpx
import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.client import Cancelled, Forbidden, GpuCloudClient
from provider.cty import GetAttr, Index
from provider.framework import DiagnosticError
from provider.framework.server import ProviderServer
from provider.resources._common import (
    GpuCloudConfig,
    api_error,
    client_of,
    number,
    path_from_field,
)
from provider.resources.provider import GpuCloudProvider
from provider.resources.shared_volume import SharedVolumeResource
from tests.provider.resources.fakes import context

SCHEMA = SharedVolumeResource.schema


def test_path_from_field_maps_api_fields_to_attribute_paths():
    assert path_from_field("size_tib", SCHEMA) == (GetAttr("size_tib"),)
    assert path_from_field("volume_id", SCHEMA, {"volume_id": "id"}) == (GetAttr("id"),)
    assert path_from_field("attached_cluster_ids[2]", SCHEMA) == (GetAttr("attached_cluster_ids"), Index(2))
    assert path_from_field("If-Match", SCHEMA) is None
    assert path_from_field(None, SCHEMA) is None
    assert path_from_field("nonexistent.deep", SCHEMA) is None


def test_number_is_exact():
    assert number(3) == 3 and number(Decimal("2.50")) == Decimal("2.5") and number("4.0") == 4
    with pytest.raises(TypeError):
        number(True)


def test_client_of_unconfigured_provider_is_a_clear_error():
    with pytest.raises(DiagnosticError) as raised:
        client_of(context(None))
    assert raised.value.diagnostic.summary == "Provider Not Configured"


def test_api_error_for_a_member_key_says_writes_need_the_admin_role():
    ctx = context(None)
    detail = "this API key may not change shared volumes"
    error = Forbidden(status=403, code="forbidden_role", detail=detail)
    api_error(ctx, "Error Creating Shared Volume", error, subject="shared volume")
    (diag,) = ctx.diagnostics
    assert "need an API key with the admin role" in diag.detail
    assert "member or admin" not in diag.detail  # a member key is exactly what failed


def test_api_error_keeps_field_names_and_does_not_contradict_the_api():
    from provider.client import Conflict, Forbidden
    from provider.resources._common import api_error

    ctx = context()
    api_error(ctx, "Error Deleting GPU Cluster",
              Conflict(status=409, detail="deletion_protection is on; set it to false first"), subject="x")
    api_error(ctx, "Error Creating GPU Cluster", Forbidden(
        status=403, detail="this API key has the member role, which is read-only; use an admin key"),
        subject="x")
    api_error(ctx, "Error Creating GPU Cluster", Forbidden(
        status=403, code="quota_exceeded", detail="the project's quota max_gpus is 8 GPUs: 0 in use"),
        subject="x")
    protected, member, quota = (d.detail for d in ctx.diagnostics)
    assert protected == "deletion_protection is on; set it to false first."
    assert member == "This API key has the member role, which is read-only; use an admin key."
    assert quota == "The project's quota max_gpus is 8 GPUs: 0 in use."  # no word of roles


def test_client_of_requests_in_flight_end_when_terraform_sends_stop_provider():
    release = threading.Event()

    def hangs(request: httpx.Request) -> httpx.Response:
        release.wait(120)  # an API that does not answer: unless cancelled, the call returns OK after 2 min
        return httpx.Response(200, json={})

    client = GpuCloudClient("http://api.test", "k", transport=httpx.MockTransport(hangs), max_retries=0)
    server = ProviderServer(GpuCloudProvider())
    server._provider_data = GpuCloudConfig("http://api.test", "k", 30.0, 0, client=client)
    ctx = server._context("gpucloud_gpu_cluster")
    threading.Timer(0.05, server.stop_provider, [pb.StopProvider.Request()]).start()
    try:
        with pytest.raises(Cancelled):
            client_of(ctx).get_cluster("cls_1")
    finally:
        release.set()
    # The stop holds for the rest of this command; the next command's ConfigureProvider starts afresh
    # (tests/provider/framework/test_server.py).
    assert server._context().stop_event.is_set()
