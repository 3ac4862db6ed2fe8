"""A cluster's container images as declared: the rules a `container_images` map and its
`registry_credentials` must meet, and the credentials kept sealed on the cluster row (the API returns
only their usernames). The engine's side is backend.provisioning.cluster_images."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from backend.domain.catalog import Catalog
from backend.domain.errors import ApiError, FieldError
from backend.provisioning import images
from backend.provisioning.cluster_images import CONTAINER_NAME
from backend.store.models import Cluster


def check(spec: Mapping[str, Any], catalog: Catalog) -> list[FieldError]:
    """Every broken rule of the spec's `container_images` (names and references, each error at its key)
    and of a single-node `container` given as an image reference."""
    declared = spec.get("container_images") or {}
    errors: list[FieldError] = []
    for name, reference in sorted(declared.items()):
        try:
            images.check_image_name(name)
            images.parse_image_ref(reference, field_path=f"container_images.{name}")
        except ApiError as exc:
            errors.append(FieldError(exc.field or "container_images", exc.code, exc.detail))
    container = spec.get("container")
    if isinstance(container, str) and container not in catalog.container_aliases:
        try:
            images.parse_image_ref(container, field_path="container")
        except ApiError as exc:
            errors.append(FieldError(exc.field or "container", exc.code, exc.detail))
    if container is not None and CONTAINER_NAME in declared:
        errors.append(FieldError(
            f"container_images.{CONTAINER_NAME}", "reserved_name",
            f'the name "{CONTAINER_NAME}" is the single-node container\'s own (/images/{CONTAINER_NAME}): '
            "choose another name"))
    if declared and spec.get("orchestrator") != "slurm":
        errors.append(FieldError(
            "container_images", "requires_slurm",
            "container_images run through Slurm (`srun --container=/images/<name>`): they need orchestrator "
            f"= \"slurm\" (this cluster has {spec.get('orchestrator')})"))
    return errors


def check_credentials(credentials: Mapping[str, Any] | None) -> list[FieldError]:
    errors = []
    for registry in sorted(credentials or {}):
        try:
            images.check_registry_host(registry)
        except ApiError as exc:
            errors.append(FieldError(exc.field or "registry_credentials", exc.code, exc.detail))
    return errors


def store_credentials(row: Cluster, credentials: Mapping[str, Any]) -> None:
    """Replace the cluster's registry credentials ({registry: {username, password}}, plain or models)."""
    plain = {registry: {"username": _field(login, "username"), "password": _field(login, "password")}
             for registry, login in sorted(credentials.items())}
    row.registry_credentials = json.dumps(plain) if plain else None
    row.registry_usernames = {registry: login["username"] for registry, login in plain.items()}


def _field(login: Any, key: str) -> str:
    return str(login[key] if isinstance(login, Mapping) else getattr(login, key))
