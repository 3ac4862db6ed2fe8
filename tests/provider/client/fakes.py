"""Test doubles: a scripted API behind httpx.MockTransport, and a fake clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from provider.client import GpuCloudClient

API_KEY = "gpc_live_s3cr3t-key-value"
Handler = Callable[[httpx.Request], httpx.Response]


class FakeClock:
    """Time that moves only when something sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedApi:
    """Answers each request with the next scripted response (or exception); records what was sent."""

    def __init__(self, *script: httpx.Response | Exception | Handler) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.script:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return step
        return step(request)

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]


def problem(
    status: int, code: str, detail: str = "", field: str | None = None, **extra: Any
) -> httpx.Response:
    document = {
        "type": "about:blank",
        "title": "t",
        "status": status,
        "code": code,
        "detail": detail,
        "field": field,
        "errors": [],
        "request_id": "req-1",
        **extra,
    }
    return httpx.Response(status, json=document, headers={"content-type": "application/problem+json"})


def make_client(api: ScriptedApi, clock: FakeClock | None = None, **options: Any) -> GpuCloudClient:
    options.setdefault("max_retries", 3)
    return GpuCloudClient(
        "http://api.test:8080",
        API_KEY,
        timeout=5,
        transport=httpx.MockTransport(api),
        user_agent="terraform-provider-gpucloud/test",
        sleep=(clock or FakeClock()).sleep,
        **options,
    )
