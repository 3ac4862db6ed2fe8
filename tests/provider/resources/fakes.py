"""Unit-test helpers: a Context wired to a GpuCloudClient over httpx.MockTransport, and plan runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx

from provider.client import GpuCloudClient
from provider.framework import Context, Resource
from provider.framework.plan import plan_resource
from provider.resources._common import GpuCloudConfig

Handler = Callable[[httpx.Request], httpx.Response]


def problem(status: int, code: str, detail: str, **extra: Any) -> httpx.Response:
    body = {"title": "x", "status": status, "code": code, "detail": detail, **extra}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


def context(handler: Handler | None = None, *, private: dict[str, Any] | None = None) -> Context:
    """A Context whose provider data holds a client answering through `handler` (None: unconfigured)."""
    if handler is None:
        data = GpuCloudConfig("http://api.test", None, 5.0, 0, complete=False)
    else:
        client = GpuCloudClient(
            "http://api.test",
            "gpc_test",
            max_retries=2,
            transport=httpx.MockTransport(handler),
            sleep=lambda _s: None,
        )
        data = GpuCloudConfig("http://api.test", "gpc_test", 5.0, 2, client=client)
    return Context(stop=threading.Event(), provider_data=data, private=private)


def plan(
    resource: Resource, ctx: Context, config: dict[str, Any], prior: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """What PlanResourceChange computes: the planned state and the names of replacement paths."""
    empty = dict.fromkeys(resource.schema.attributes)
    full_config = {**empty, **config}
    proposed = {**(prior or empty), **config}
    planned, replace = plan_resource(resource.schema, full_config, prior, proposed)
    ctx.requires_replace = replace
    planned = resource.modify_plan(ctx, planned, prior, full_config)
    return planned, [p[0].name for p in ctx.requires_replace]  # type: ignore[union-attr]
