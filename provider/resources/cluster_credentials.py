"""Ephemeral resource `gpucloud_cluster_credentials`: how to log in to a cluster, never stored in state.

Kubernetes clusters give an admin kubeconfig (from the audited, admin-only credentials endpoint); Slurm
and bare clusters give the SSH login (host, port, user, command). Feed it to a `kubernetes` provider block
or a local-exec, not to resource arguments that would land in state.

The kubeconfig's token is a lease (`expires_at`, an hour by default): the result asks Terraform to renew
it halfway to its expiry (RenewEphemeralResource), so a long apply using the kubernetes provider keeps a
valid token for as long as it runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from provider.client import ApiError, NotFound
from provider.framework import (
    Context,
    EphemeralResource,
    EphemeralResult,
    Int64Attribute,
    Schema,
    State,
    StringAttribute,
    parse_instant,
    root,
)
from provider.framework.validators import string_matches
from provider.resources._common import api_error, client_of
from provider.resources.gpu_cluster_schema import REF_ID_PATTERN, login_state

SUMMARY = "Error Reading Cluster Credentials"


def _computed(description: str, sensitive: bool = False) -> StringAttribute:
    return StringAttribute(computed=True, sensitive=sensitive, description=description)


class ClusterCredentialsEphemeralResource(EphemeralResource):
    type_name = "gpucloud_cluster_credentials"
    schema = Schema(
        description="Credentials to reach a GPU cluster, opened on every Terraform run and never written to "
        "state or plan: a kubeconfig for Kubernetes clusters, the SSH login for Slurm and bare clusters.",
        attributes={
            "cluster_id": StringAttribute(
                required=True,
                description="Id of the cluster (e.g. `gpucloud_gpu_cluster.example.id`).",
                validators=[string_matches(REF_ID_PATTERN, "must be a cluster id such as cls_abc123")],
            ),
            "kind": _computed("`kubeconfig` for Kubernetes clusters, `ssh` for the others."),
            "kubeconfig": _computed("Admin kubeconfig (Kubernetes clusters only).", sensitive=True),
            "api_endpoint": _computed("Kubernetes API URL (Kubernetes clusters only)."),
            "host": _computed("SSH host: the jumphost of a multi-node cluster, else the node."),
            "port": Int64Attribute(computed=True, description="SSH port."),
            "user": _computed("SSH user."),
            "ssh_command": _computed("A ready-to-run SSH command line."),
            "host_key": _computed(
                "The SSH host's public key as an OpenSSH public-key line (`ssh-ed25519 AAAA...`) for a "
                "known_hosts entry; null until the login host is up."
            ),
            "expires_at": _computed(
                "When the kubeconfig's token lapses unless renewed (RFC 3339; Kubernetes clusters only). "
                "Terraform renews it while it runs; a later run opens fresh credentials."
            ),
        },
    )

    def open(self, ctx: Context, config: State) -> EphemeralResult:
        client = client_of(ctx)
        cluster_id = config["cluster_id"]
        result: dict[str, Any] = {"cluster_id": cluster_id}
        try:
            cluster = client.get_cluster(cluster_id)
            login = login_state(cluster.get("login")) or {}
            result.update(login)
            if cluster.get("orchestrator") == "kubernetes":
                credentials = client.get_cluster_credentials(cluster_id)
                result.update(
                    kind="kubeconfig",
                    kubeconfig=credentials.get("kubeconfig"),
                    api_endpoint=credentials.get("api_endpoint"),
                    expires_at=credentials.get("expires_at"),
                )
            else:
                result["kind"] = "ssh"
        except NotFound as error:
            ctx.error(
                "Cluster Not Found",
                f'No cluster with id "{cluster_id}" exists (or it has no credentials yet: {error.detail}).',
                root("cluster_id"),
            )
            return EphemeralResult(result)
        except ApiError as error:
            api_error(ctx, SUMMARY, error, subject="GPU cluster")
            return EphemeralResult(result)
        if not login and result.get("kind") == "ssh":
            ctx.error(
                "Cluster Not Reachable Yet",
                f"Cluster {cluster_id} has no login yet (status {cluster.get('status')}); apply the cluster "
                "with wait_for_running = true first.",
                root("cluster_id"),
            )
        if result.get("expires_at") is None:
            return EphemeralResult(result)
        ctx.private["cluster_id"] = cluster_id
        return EphemeralResult(result, renew_at=_renew_at(result["expires_at"]))

    def renew(self, ctx: Context) -> dt.datetime | None:
        """Extend the token's lease while Terraform still uses it; when next to renew."""
        cluster_id = ctx.private["cluster_id"]
        try:
            renewed = client_of(ctx).renew_cluster_credentials(cluster_id)
        except ApiError as error:
            api_error(ctx, "Error Renewing Cluster Credentials", error, subject="GPU cluster")
            return None
        return _renew_at(renewed["expires_at"])


def _renew_at(expires_at: str) -> dt.datetime:
    """Halfway to the expiry: room for a late renewal, or a retry, before the token lapses."""
    now = dt.datetime.now(dt.UTC)
    expiry = parse_instant(expires_at)  # a time without offset is UTC, never a naive/aware mix-up
    if expiry is None:
        raise ValueError(f"the API's expires_at is not a time: {expires_at!r}")
    return now + (expiry - now) / 2
