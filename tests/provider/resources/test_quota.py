"""`gpucloud_quota` and the plan-time quota check of `gpucloud_gpu_cluster` (against GET /v1/quotas)."""

from decimal import Decimal

import httpx

from provider.resources import cluster_checks as checks
from provider.resources.quota_data_source import QuotaDataSource
from tests.provider.resources.fakes import context

QUOTAS = {"max_clusters": 3, "clusters_in_use": 1, "max_gpus": 24, "gpus_in_use": 16,
          "max_hourly_usd": "100", "hourly_usd_in_use": "63.84", "updated_at": "2026-11-26T12:00:00Z"}
CATALOG = checks.Catalog(regions={}, instance_types={"8xH100": {"gpu_count": 8}})
PLAN = {"instance_type": "8xH100", "node_count": 1}


def api(request: httpx.Request, **changes: object) -> httpx.Response:
    assert request.url.path == "/v1/quotas"
    return httpx.Response(200, json={**QUOTAS, **changes})


def test_quota_data_source_reads_quotas_and_use() -> None:
    state = QuotaDataSource().read(context(api), {})
    assert state == {"max_clusters": 3, "clusters_in_use": 1, "max_gpus": 24, "gpus_in_use": 16,
                     "max_hourly_usd": 100, "hourly_usd_in_use": Decimal("63.84")}


def test_quota_plan_check_names_the_quota_a_create_or_scale_up_passes() -> None:
    ctx = context(api)
    fits = checks.CostEstimate(Decimal("31.92"), None)
    checks.check_plan_quota(ctx, ctx.provider_data.client, CATALOG, PLAN, None, fits)  # 24 GPUs, 95.76 USD/h
    assert not ctx.diagnostics.has_errors

    ctx = context(api)  # 16 + 16 GPUs > 24
    checks.check_plan_quota(ctx, ctx.provider_data.client, CATALOG, {**PLAN, "node_count": 2}, None, None)
    (error,) = ctx.diagnostics
    assert error.summary == "Quota Exceeded" and error.path[0].name == "node_count"
    assert "quota max_gpus is 24 GPUs: 16 in use, and this plan adds 16 (32 in all)" in error.detail

    ctx = context(lambda request: api(request, max_hourly_usd="90"))  # 1 node to 2: +31.92 USD/h > 90
    state = {"node_count": 1, "estimated_hourly_cost_usd": Decimal("31.92")}
    scaled = checks.CostEstimate(Decimal("63.84"), None)
    checks.check_plan_quota(ctx, ctx.provider_data.client, CATALOG, {**PLAN, "node_count": 2}, state, scaled)
    (error,) = ctx.diagnostics
    assert "max_hourly_usd is 90 USD per hour: 63.84 in use, and this plan adds 31.92 (95.76" in error.detail

    ctx = context(api)  # a scale-down adds nothing and reads no quota
    checks.check_plan_quota(ctx, ctx.provider_data.client, CATALOG, PLAN, {"node_count": 3}, None)
    assert not ctx.diagnostics.has_errors
