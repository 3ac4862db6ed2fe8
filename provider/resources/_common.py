"""gpucloud glue shared by every resource and data source: the configured client, API errors as
diagnostics, the catalog's regions, API numbers, and the id/name lookup of data sources. The create and
ETag policy of resources lives in `rest.py`; semantic equality and time spellings in the framework.

Resources never build clients themselves: `ConfigureProvider` does once per provider process and hands
a `GpuCloudConfig` to every call as `ctx.provider_data`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from provider.client import (
    TLS_VERIFICATION_FAILED,
    ApiError,
    Conflict,
    Forbidden,
    GpuCloudClient,
    NotFound,
    PreconditionFailed,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    ValidationFailed,
)
from provider.cty import AttributePath, GetAttr, Index
from provider.framework import Context, DiagnosticError, IdentityAttribute, IdentitySchema, Schema, root


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
    client: GpuCloudClient | None = field(default=None, compare=False, repr=False)


def configured(ctx: Context) -> bool:
    """True when the API may be called (the provider block is fully known and was accepted)."""
    config = ctx.provider_data
    return isinstance(config, GpuCloudConfig) and config.complete and config.client is not None


def client_of(ctx: Context) -> GpuCloudClient:
    """The API client built by ConfigureProvider, cancelled with the call (StopProvider ends its requests
    in flight, not only its waits); a clear error when the provider is not configured."""
    config = ctx.provider_data
    if not isinstance(config, GpuCloudConfig) or config.client is None:
        raise DiagnosticError(
            "Provider Not Configured",
            "The gpucloud provider block is not fully known yet (it depends on values known only after "
            "apply) or was rejected. Fix the provider configuration, or apply its dependencies first.",
        )
    return config.client.cancellable(ctx.stop_event)


def api_id_identity(subject: str, prefix: str) -> IdentitySchema:
    """The identity of a gpucloud object: its API id alone (ids are unique across projects)."""
    description = f"Identifier of the {subject} (`{prefix}_...`), as the API names it."
    return IdentitySchema({"id": IdentityAttribute(description=description)})


# ---- API errors -> diagnostics ------------------------------------------------------------------------

_FIELD_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\.")


def path_from_field(
    api_field: str | None, schema: Schema, renames: Mapping[str, str] | None = None
) -> AttributePath | None:
    """The attribute path for an API field such as `size_tib`, `billing.duration_days` or
    `ssh_key_ids[1]`; None when the field names nothing in `schema` (e.g. a header or a path param).

    `renames` maps API names of top-level fields to attribute names (`volume_ids` -> `shared_volume_ids`).
    Indexes are dropped at a set (sets cannot be addressed)."""
    if not api_field:
        return None
    steps: list[GetAttr | Index] = []
    pos = 0
    while pos < len(api_field):
        m = _FIELD_STEP.match(api_field, pos)
        if m is None or m.end() == pos:
            break
        if m.group(1):
            steps.append(GetAttr(m.group(1)))
        elif m.group(2):
            steps.append(Index(int(m.group(2))))
        pos = m.end()
    if not steps or not isinstance(steps[0], GetAttr):
        return None
    first = (renames or {}).get(steps[0].name, steps[0].name)
    attribute = schema.attributes.get(first)
    if attribute is None and first not in schema.blocks:
        return None
    steps[0] = GetAttr(first)
    if len(steps) > 1 and attribute is not None and type(attribute).__name__.startswith("Set"):
        steps = steps[:1]
    return AttributePath(steps)


# 403 codes whose detail already says what to change (`forbidden_role` names the key to use itself).
SELF_EXPLAINED_REFUSALS = frozenset({"quota_exceeded", "out_of_scope"})


def _next_step(error: ApiError, subject: str) -> str:
    if isinstance(error, Unauthorized):
        return "The API key was rejected: check api_key in the provider block or GPUCLOUD_API_KEY."
    if isinstance(error, Forbidden):
        if "admin key" in error.detail or error.code in SELF_EXPLAINED_REFUSALS:
            return ""  # the API already said which key to use, which quota or which team scope
        return (
            "Creating, changing or deleting objects and reading cluster credentials need an API key with "
            "the admin role; member keys are read-only."
        )
    if isinstance(error, TransportError):
        if error.code == TLS_VERIFICATION_FAILED:
            return ""  # the detail names the endpoint and how to trust its certificate
        return "Check the provider's endpoint and that the gpucloud API is running, then retry."
    if isinstance(error, RateLimited):
        return "The API kept rate-limiting the requests after the retries; wait a moment and retry."
    if isinstance(error, PreconditionFailed):
        return (
            f"The {subject} changed outside Terraform since it was last read. Run terraform apply again: "
            "it refreshes first and plans against the current object."
        )
    if isinstance(error, ServerError):
        return "The API failed; retry later, and report the request id if it keeps failing."
    if isinstance(error, NotFound):
        # A field names what was not found (a node of a cluster...): the API's detail says which.
        return "" if error.field else f"The {subject} no longer exists."
    return ""


def api_error(
    ctx: Context,
    summary: str,
    error: ApiError,
    *,
    subject: str,
    schema: Schema | None = None,
    renames: Mapping[str, str] | None = None,
    extra: str = "",
) -> None:
    """Add diagnostics for a failed API call: one per field error of a 422 (at its attribute path), else
    one with the API's explanation and the next step. `subject` names the object ("shared volume")."""
    if isinstance(error, ValidationFailed) and error.errors and schema is not None:
        for item in error.errors:
            item_field = str(item.get("field") or "") or None
            path = path_from_field(item_field, schema, renames)
            message = str(item.get("message") or error.detail)
            ctx.error(summary, _sentence(message), path)
        return
    path = path_from_field(error.field, schema, renames) if schema is not None else None
    parts = [_sentence(error.detail or error.title or str(error)), _next_step(error, subject)]
    if error.request_id:
        parts.append(f"(request id {error.request_id})")
    if extra:
        parts.append(extra)
    ctx.error(summary, " ".join(p for p in parts if p), path)


def _sentence(text: str) -> str:
    """The API's message as a sentence: a capital first letter, unless the message starts with a field
    name (`deletion_protection is on`), which keeps its spelling."""
    text = text.strip()
    if not text:
        return text
    first = text.split(maxsplit=1)[0]
    if not any(c in first for c in "_.[") and not any(c.isdigit() for c in first):
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def conflict_existing_id(error: ApiError) -> str | None:
    """The id of the object a 409 says already exists (duplicate SSH key...), when the API names it."""
    if isinstance(error, Conflict):
        found = error.extra.get("existing_id")
        return found if isinstance(found, str) else None
    return None


# ---- catalog ---------------------------------------------------------------------------------------

_REGIONS: dict[int, dict[str, dict[str, Any]]] = {}


def regions_by_name(ctx: Context) -> dict[str, dict[str, Any]]:
    """The API's regions by name, read once per provider process (the catalog does not change while
    Terraform runs). Plan-time checks use it to name the regions that exist."""
    client = client_of(ctx)
    cached = _REGIONS.get(client.cache_key)
    if cached is None:
        try:
            items = client.list_regions()
        except ApiError as error:
            raise DiagnosticError(
                "Error Reading Regions", f"{_sentence(error.detail)} {_next_step(error, 'catalog')}".strip()
            ) from None
        cached = _REGIONS[client.cache_key] = {str(r["name"]): r for r in items if isinstance(r, dict)}
    return cached


# ---- value conversions ------------------------------------------------------------------------------


def number(value: Any) -> int | Decimal:
    """An API number (int, Decimal or decimal string) as an exact cty number."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        return value
    exact = Decimal(str(value))
    return int(exact) if exact == exact.to_integral_value() else exact


def exactly_one(ctx: Context, config: Mapping[str, Any], names: tuple[str, str]) -> bool:
    """Data source lookups: exactly one of two attributes is set (unknown counts as set). Errors at
    the second attribute otherwise; returns whether the configuration is acceptable."""
    given = [n for n in names if config.get(n) is not None]
    if len(given) == 1:
        return True
    a, b = names
    detail = (
        f"Set either {a} or {b}, not both."
        if given
        else f"Set {a} or {b} to choose which object to read."
    )
    ctx.error("Invalid Attribute Combination", detail, root(b if given else a))
    return False
