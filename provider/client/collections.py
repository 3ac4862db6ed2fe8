"""The API's object collections (`/v1/ssh-keys`, `/v1/budgets`, ...) as typed handles: create, get, update
and delete of one object, every id escaped into one path segment, the full response kept for its ETag.

Terraform resources use these (they need the ETag of each answer for the next If-Match); the
single-purpose methods of `GpuCloudClient` (`get_ssh_key`, ...) answer bodies only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from provider.client.http import ApiResponse, HttpCore


def path_segment(value: str) -> str:
    """One path segment, escaped so an id can never change the path (`../`, `?`, `#`, `/`)."""
    return quote(str(value), safe="")


@dataclass(frozen=True)
class Collection:
    """One collection of the API, bound to a client."""

    http: HttpCore
    path: str  # e.g. "/v1/ssh-keys"

    def item_path(self, object_id: str) -> str:
        return f"{self.path}/{path_segment(object_id)}"

    def items(self, **filters: Any) -> Iterator[Any]:
        """Every object of the collection (following page tokens); None filters are left out."""
        return self.http.iter_items(self.path, filters)

    def create(self, body: Mapping[str, Any], *, idempotency_key: str) -> ApiResponse:
        """POST a new object; a retry (or a later replay) with the same key answers the first outcome."""
        return self.http.request("POST", self.path, json=dict(body), idempotency_key=idempotency_key)

    def get(self, object_id: str) -> ApiResponse:
        return self.http.request("GET", self.item_path(object_id))

    def update(
        self, object_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> ApiResponse:
        """PATCH: absent fields keep their value."""
        return self.http.request("PATCH", self.item_path(object_id), json=dict(changes), if_match=if_match)

    def delete(self, object_id: str, *, if_match: str | None = None) -> ApiResponse:
        return self.http.request("DELETE", self.item_path(object_id), if_match=if_match)
