"""Node health for a cluster's state: the cluster object carries each node's status, the nodes endpoint
(`GET /v1/clusters/{id}/nodes`) its health. Health is informative, so a backend that cannot say (an
older API without the endpoint, a transient failure) leaves it null instead of failing a refresh."""

from __future__ import annotations

import logging
from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.http import Cancelled

log = logging.getLogger("provider.resources.gpu_cluster")


def with_node_health(client: GpuCloudClient, body: dict[str, Any]) -> dict[str, Any]:
    """`body` with `health` on each node, matched by instance id (a node being repaired in place keeps
    its name, so the machine leaving and its replacement can both be listed under it)."""
    nodes = body.get("nodes")
    if not nodes or not body.get("id"):
        return body
    try:
        listing = client.list_cluster_nodes(str(body["id"]))
    except Cancelled:
        return body  # saving what the apply has after Ctrl-C: health waits for the next refresh
    except ApiError as error:
        log.warning("gpu cluster %s: node health unavailable (%s)", body["id"], error)
        return body
    health = {
        item.get("instance_id"): item.get("health")
        for item in listing.get("items") or []
        if isinstance(item, dict)
    }
    return {**body, "nodes": [{**n, "health": health.get(n.get("instance_id"))} for n in nodes]}
