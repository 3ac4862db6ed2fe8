"""A cluster's container images in the engine: the declared `container_images` (name -> reference) are
imported by one cluster-wide driver operation (IMAGES_IMPORT: each image pulled once onto the cluster's
shared storage, shown at /images/<name> on every node), never per node.

`EngineCluster.images` records, per name, what /images/<name> shows (`serving_reference`, `digest`,
`size_bytes`) and the state of the declared reference: `importing`, `ready` or `failed` (with `reason`).
A name whose import failed keeps what it showed before. A create waits for its images before its nodes
start (a failure rolls the create back); a change on a running cluster imports in the background and
switches names as their images arrive. A declared set that failed is not retried until it changes, or
until a PATCH repeats `container_images` or changes `registry_credentials` (services.clusters).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from backend.domain.catalog import default_catalog
from backend.provisioning import images as image_store
from backend.provisioning.driver import ImageOutcome, Operation, OperationRequest, OpKind
from backend.store.engine_models import EngineCluster
from backend.store.models import Cluster

PENDING, IMPORTING, READY, FAILED = "pending", "importing", "ready", "failed"
CONTAINER_NAME = "container"  # a single-node cluster's `container`: imported as /images/container

Submit = Callable[[OperationRequest, bool], Operation]


def declared(cluster: Any) -> dict[str, str]:
    """name -> reference of every image the cluster needs: its container_images, and a single-node
    cluster's container (an alias resolved through the catalog) as `container`."""
    wanted = dict(cluster.container_images or {})
    if cluster.container is not None:
        wanted[CONTAINER_NAME] = default_catalog().container_reference(cluster.container)
    return wanted


def shown(images: Mapping[str, Any]) -> dict[str, str]:
    """name -> the reference /images/<name> shows now."""
    return {name: entry["serving_reference"] for name, entry in images.items()
            if entry.get("serving_reference") is not None}


def registry_credentials(cluster: Cluster) -> dict[str, image_store.RegistryCredentials]:
    """registry -> credentials, opened from the cluster's sealed column (for a driver that imports)."""
    if not cluster.registry_credentials:
        return {}
    return {registry: image_store.RegistryCredentials(login["username"], login["password"])
            for registry, login in json.loads(cluster.registry_credentials).items()}


def first_import_done(cluster: Cluster, state: EngineCluster) -> bool:
    """A new cluster's nodes start once every declared image is shown (no images: at once)."""
    return state.images_token is None and shown(state.images) == declared(cluster)


def advance(cluster: Cluster, state: EngineCluster, now: dt.datetime, due: list[dt.datetime],
            submit: Submit, record: Callable[[Operation], None]) -> str | None:
    """Start the import the declaration needs, or follow the one under way. Returns why the import failed
    when it just did (None otherwise): the caller rolls a create back with it."""
    want = declared(cluster)
    new = state.images_token is None
    if new:
        if shown(state.images) == want and set(state.images) == set(want):
            state.images_failed = None
            return None
        if state.images_failed == want:
            return None  # failed as declared: waits for a new declaration
        state.images_seq += 1
        state.images_token = f"{cluster.id}/{OpKind.IMAGES_IMPORT}/{state.images_seq}"
        state.images = _marked_importing(state.images, want, now)
    request = OperationRequest(str(state.images_token), OpKind.IMAGES_IMPORT, cluster.name,
                               attempt=state.images_seq, cluster_id=cluster.id,
                               images=tuple(sorted(want.items())))
    op = submit(request, new)
    if not op.done(now):
        if op.ready_at is not None:
            due.append(op.ready_at)
        return None
    record(op)
    state.images_token = None
    asked = dict(request.images)
    state.images = _with_outcomes(state.images, asked, op.images, op.reason, now)
    failures = [entry["reason"] for entry in state.images.values() if entry["state"] == FAILED]
    if op.succeeded and not failures:
        state.images_failed = None
        return None
    state.images_failed = asked
    return "; ".join(failures) or op.reason or "the image import failed"


def _marked_importing(images: Mapping[str, Any], want: Mapping[str, str], now: dt.datetime
                      ) -> dict[str, Any]:
    out = {name: dict(entry) for name, entry in images.items()}
    for name, reference in want.items():
        entry = out.setdefault(name, {"serving_reference": None, "digest": None, "size_bytes": None})
        if entry.get("serving_reference") != reference or entry.get("reference") != reference:
            entry.update(reference=reference, state=IMPORTING, reason=None, updated_at=now.isoformat())
    return out


def _with_outcomes(images: Mapping[str, Any], asked: Mapping[str, str], outcomes: tuple[ImageOutcome, ...],
                   op_reason: str | None, now: dt.datetime) -> dict[str, Any]:
    """The record after an import: names not asked for are gone (the driver removed them), imported ones
    show their new image, failed ones keep what they showed and say why."""
    by_name = {outcome.name: outcome for outcome in outcomes}
    out: dict[str, Any] = {}
    for name, reference in asked.items():
        entry = dict(images.get(name) or {"serving_reference": None, "digest": None, "size_bytes": None})
        outcome = by_name.get(name)
        entry.update(reference=reference, updated_at=now.isoformat())
        if outcome is not None and outcome.error is None:
            entry.update(serving_reference=reference, digest=outcome.digest, size_bytes=outcome.size_bytes,
                         state=READY, reason=None)
        else:
            why = (outcome.error if outcome is not None else None) or op_reason or "the import did not finish"
            entry.update(state=FAILED, reason=_kept(why, entry))
        out[name] = entry
    return out


def _kept(why: str, entry: Mapping[str, Any]) -> str:
    if entry.get("serving_reference") is None:
        return why
    return f"{why}; it still shows {entry['serving_reference']} ({entry['digest']})"


def image_views(cluster: Any, images: Mapping[str, Any] | None, importing: bool) -> list[dict[str, Any]]:
    """The API's `images`: one entry per declared name, by name."""
    views = []
    for name, reference in sorted(declared(cluster).items()):
        entry = (images or {}).get(name) or {}
        state = entry.get("state") or PENDING
        # Declared since the last import started, or waiting for a pass to start the next one.
        if entry.get("reference") != reference or (state == IMPORTING and not importing):
            state = PENDING
        views.append({"name": name, "reference": reference, "state": state, "digest": entry.get("digest"),
                      "size_bytes": entry.get("size_bytes"), "reason": entry.get("reason"),
                      "updated_at": entry.get("updated_at")})
    return views


def storage_bytes(images: Mapping[str, Any] | None) -> int:
    """What the bundles the names show take on the cluster's shared storage (one bundle per digest)."""
    sizes = {entry["digest"]: entry.get("size_bytes") or 0 for entry in (images or {}).values()
             if entry.get("digest")}
    return sum(sizes.values())
