"""The gpucloud provider: its configuration block, the API client it builds, and what it offers.

Resources and data sources are registered in `RESOURCES` / `DATA_SOURCES` / `EPHEMERAL_RESOURCES`
below: one line each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from provider.client import (
    DEFAULT_ENDPOINT,
    TLS_VERIFICATION_FAILED,
    ApiError,
    Forbidden,
    GpuCloudClient,
    TransportError,
    Unauthorized,
)
from provider.cty import is_unknown
from provider.framework import (
    Action,
    Context,
    DataSource,
    EphemeralResource,
    Int64Attribute,
    ListResource,
    Provider,
    Resource,
    Schema,
    StringAttribute,
    parse_duration,
    root,
)
from provider.framework.validators import custom, int_between, string_matches
from provider.resources._common import GpuCloudConfig
from provider.resources.budget import BudgetResource
from provider.resources.cluster_actions import ClusterNodeAction, ClusterRestartWorkers
from provider.resources.cluster_credentials import ClusterCredentialsEphemeralResource
from provider.resources.cluster_data_source import GpuClusterDataSource
from provider.resources.data_sources import (
    InstanceTypesDataSource,
    RegionsDataSource,
    SharedVolumeDataSource,
    SshKeyDataSource,
)
from provider.resources.gpu_cluster import GpuClusterResource
from provider.resources.host_pool import HostPoolResource
from provider.resources.host_pool_data_source import HostPoolDataSource
from provider.resources.list_resources import (
    GpuClusterListResource,
    ReservedIpListResource,
    SharedVolumeListResource,
    SshKeyListResource,
)
from provider.resources.quota_data_source import QuotaDataSource
from provider.resources.reservation import ReservationResource
from provider.resources.reserved_ip import ReservedIpResource
from provider.resources.security_group import SecurityGroupResource
from provider.resources.shared_volume import SharedVolumeResource
from provider.resources.ssh_key import SshKeyResource

if TYPE_CHECKING:  # httpx loads only when the API client is built (~50 ms less per provider launch)
    import httpx

__all__ = ["DEFAULT_ENDPOINT", "GpuCloudConfig", "GpuCloudProvider"]

# What the provider offers (resources helper B adds the cluster lines).
RESOURCES: tuple[type[Resource], ...] = (
    SshKeyResource,
    SharedVolumeResource,
    GpuClusterResource,
    BudgetResource,
    SecurityGroupResource,
    ReservationResource,
    ReservedIpResource,
    HostPoolResource,
)
DATA_SOURCES: tuple[type[DataSource], ...] = (
    RegionsDataSource,
    InstanceTypesDataSource,
    SshKeyDataSource,
    SharedVolumeDataSource,
    GpuClusterDataSource,
    QuotaDataSource,
    HostPoolDataSource,
)
EPHEMERAL_RESOURCES: tuple[type[EphemeralResource], ...] = (ClusterCredentialsEphemeralResource,)
LIST_RESOURCES: tuple[type[ListResource], ...] = (
    SshKeyListResource,
    SharedVolumeListResource,
    GpuClusterListResource,
    ReservedIpListResource,
)
ACTIONS: tuple[type[Action], ...] = (ClusterNodeAction, ClusterRestartWorkers)

DEFAULT_REQUEST_TIMEOUT = "30s"
DEFAULT_MAX_RETRIES = 4


def _is_duration(text: str) -> bool:
    try:
        return parse_duration(text).total_seconds() > 0
    except ValueError:
        return False


class GpuCloudProvider(Provider):
    type_name = "gpucloud"
    version = "0.1.0"
    schema = Schema(
        description="Provision GPU clusters, shared volumes, SSH keys and reserved IPs on a gpucloud "
        "control plane.",
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

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        # Tests inject an httpx transport; Terraform launches use the real network.
        self._transport = transport
        self._resources = [r() for r in RESOURCES]
        self._data_sources = [d() for d in DATA_SOURCES]
        self._ephemerals = [e() for e in EPHEMERAL_RESOURCES]
        self._listers = [r() for r in LIST_RESOURCES]
        self._actions = [a() for a in ACTIONS]

    def configure(self, ctx: Context, config: dict[str, Any]) -> GpuCloudConfig:
        if any(is_unknown(v) for v in config.values()):
            # Known only after another resource is applied: plan without the API, configure later.
            return GpuCloudConfig(DEFAULT_ENDPOINT, None, 30.0, DEFAULT_MAX_RETRIES, complete=False)
        endpoint = config.get("endpoint") or os.environ.get("GPUCLOUD_ENDPOINT") or DEFAULT_ENDPOINT
        api_key = config.get("api_key") or os.environ.get("GPUCLOUD_API_KEY") or None
        timeout = parse_duration(config.get("request_timeout") or DEFAULT_REQUEST_TIMEOUT).total_seconds()
        retries = config.get("max_retries")
        resolved = GpuCloudConfig(
            endpoint=endpoint.rstrip("/"),
            api_key=api_key,
            request_timeout_seconds=timeout,
            max_retries=DEFAULT_MAX_RETRIES if retries is None else int(retries),
        )
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
        if ctx.diagnostics.has_errors:
            return resolved
        client = self._client(resolved)
        if not self._credentials_accepted(ctx, client, resolved):
            client.close()
            return resolved
        return GpuCloudConfig(
            resolved.endpoint, api_key, timeout, resolved.max_retries, complete=True, client=client
        )

    def _client(self, config: GpuCloudConfig) -> GpuCloudClient:
        return GpuCloudClient(
            config.endpoint,
            config.api_key or "",
            timeout=config.request_timeout_seconds,
            max_retries=config.max_retries,
            transport=self._transport,
            user_agent=f"terraform-provider-gpucloud/{self.version}",
        )

    @staticmethod
    def _credentials_accepted(ctx: Context, client: GpuCloudClient, config: GpuCloudConfig) -> bool:
        """One cheap authenticated read, so a wrong key or endpoint is reported at the provider block."""
        try:
            client.verify_credentials()
        except Unauthorized:
            ctx.error(
                "Invalid API Key",
                f"The gpucloud API at {config.endpoint} rejected the API key (unknown, malformed or "
                "revoked). Check api_key in the provider block or GPUCLOUD_API_KEY.",
                root("api_key"),
            )
            return False
        except Forbidden as error:
            ctx.error("API Key Not Allowed", f"{error.detail} Use a key with the member or admin role.",
                      root("api_key"))
            return False
        except TransportError as error:
            if error.code == TLS_VERIFICATION_FAILED:
                ctx.error("Untrusted TLS Certificate", f"{error.detail}.", root("endpoint"))
                return False
            ctx.error(
                "Cannot Reach the gpucloud API",
                f"No answer from {config.endpoint} ({error.detail}). Check endpoint (or GPUCLOUD_ENDPOINT) "
                "and that the API is running.",
                root("endpoint"),
            )
            return False
        except ApiError as error:
            ctx.error(
                "Cannot Verify the API Key",
                f"The gpucloud API at {config.endpoint} answered {error.status}: {error.detail}",
                root("endpoint"),
            )
            return False
        return True

    def resources(self) -> Sequence[Resource]:
        return self._resources

    def data_sources(self) -> Sequence[DataSource]:
        return self._data_sources

    def ephemeral_resources(self) -> Sequence[EphemeralResource]:
        return self._ephemerals

    def list_resources(self) -> Sequence[ListResource]:
        return self._listers

    def actions(self) -> Sequence[Action]:
        return self._actions
