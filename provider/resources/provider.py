"""The gpucloud provider: its configuration block and what it offers (resources arrive in later work)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provider.cty import is_unknown
from provider.framework import (
    Context,
    DataSource,
    EphemeralResource,
    Int64Attribute,
    Provider,
    Resource,
    Schema,
    StringAttribute,
    parse_duration,
    root,
)
from provider.framework.validators import custom, int_between, string_matches

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
DEFAULT_REQUEST_TIMEOUT = "30s"
DEFAULT_MAX_RETRIES = 4


def _is_duration(text: str) -> bool:
    try:
        return parse_duration(text).total_seconds() > 0
    except ValueError:
        return False


@dataclass(frozen=True)
class GpuCloudConfig:
    """The resolved provider configuration handed to resources as `ctx.provider_data`.

    `complete` is False while some value is unknown (Terraform plans before a value it depends on is
    known); resources must then plan without calling the API."""

    endpoint: str
    api_key: str | None
    request_timeout_seconds: float
    max_retries: int
    complete: bool = True


class GpuCloudProvider(Provider):
    type_name = "gpucloud"
    version = "0.1.0"
    schema = Schema(
        description="Provision GPU clusters, shared volumes and SSH keys on a gpucloud control plane.",
        attributes={
            "endpoint": StringAttribute(
                optional=True,
                description="Base URL of the gpucloud API, for example `https://api.gpucloud.example`. "
                f"Defaults to the `GPUCLOUD_ENDPOINT` environment variable, then `{DEFAULT_ENDPOINT}`.",
                validators=[string_matches(r"https?://\S+", "must be an http:// or https:// URL")],
            ),
            "api_key": StringAttribute(
                optional=True,
                sensitive=True,
                description="API key sent with every request. Defaults to the `GPUCLOUD_API_KEY` environment "
                "variable. Prefer the environment variable over writing the key into configuration.",
            ),
            "request_timeout": StringAttribute(
                optional=True,
                description="Timeout of one HTTP request, a duration such as `30s` or `2m`. "
                f"Default: `{DEFAULT_REQUEST_TIMEOUT}`.",
                validators=[custom('must be a positive duration such as "30s" or "2m"', _is_duration)],
            ),
            "max_retries": Int64Attribute(
                optional=True,
                description="How many times a request is retried on connection errors and 429/502/503/504 "
                f"responses (honouring `Retry-After`). Default: `{DEFAULT_MAX_RETRIES}`.",
                validators=[int_between(0, 20)],
            ),
        },
    )

    def configure(self, ctx: Context, config: dict[str, Any]) -> GpuCloudConfig:
        if any(is_unknown(v) for v in config.values()):
            # Known only after another resource is applied: plan without the API, configure later.
            return GpuCloudConfig(DEFAULT_ENDPOINT, None, 30.0, DEFAULT_MAX_RETRIES, complete=False)
        endpoint = config.get("endpoint") or os.environ.get("GPUCLOUD_ENDPOINT") or DEFAULT_ENDPOINT
        api_key = config.get("api_key") or os.environ.get("GPUCLOUD_API_KEY") or None
        timeout = parse_duration(config.get("request_timeout") or DEFAULT_REQUEST_TIMEOUT).total_seconds()
        retries = config.get("max_retries")
        if not endpoint.startswith(("http://", "https://")):
            ctx.error(
                "Invalid Endpoint",
                f'The endpoint "{endpoint}" (from GPUCLOUD_ENDPOINT) must start with http:// or https://.',
                root("endpoint"),
            )
        if api_key is None:
            ctx.error(
                "Missing API Key",
                "Set api_key in the provider block or the GPUCLOUD_API_KEY environment variable "
                "with an API key of your gpucloud project.",
                root("api_key"),
            )
        return GpuCloudConfig(
            endpoint=endpoint.rstrip("/"),
            api_key=api_key,
            request_timeout_seconds=timeout,
            max_retries=DEFAULT_MAX_RETRIES if retries is None else int(retries),
        )

    def resources(self) -> Sequence[Resource]:
        return ()

    def data_sources(self) -> Sequence[DataSource]:
        return ()

    def ephemeral_resources(self) -> Sequence[EphemeralResource]:
        return ()
