"""GpuCloudClient: one method per backend API operation. Bodies are plain dicts with the API's snake_case
field names; non-integral numbers arrive as Decimal. Knows nothing of Terraform.

Creates take an explicit `idempotency_key` so a caller can persist the key of a create before sending
it: a retried request, or a re-run after a crash, then replays the first outcome instead of creating a
second object.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from provider.client.collections import Collection, path_segment
from provider.client.errors import ServerError
from provider.client.http import ApiResponse, HttpCore

Body = dict[str, Any]

# Where a local backend (`gpucloud-backend serve`, `make demo`) listens: the provider's and the CLI's default.
DEFAULT_ENDPOINT = "http://127.0.0.1:8080"


def new_idempotency_key() -> str:
    """A fresh key for one logical create (keep it with the resource until the create is recorded)."""
    return str(uuid.uuid4())


_seg = path_segment


class GpuCloudClient(HttpCore):
    """The backend API. `GpuCloudClient(endpoint, api_key, timeout=..., max_retries=..., transport=...,
    user_agent=...)`; see `HttpCore` for the retry policy. Thread-safe (one pooled httpx.Client)."""

    # ---- collections (create/get/update/delete with the full response, for ETags) -------------------

    @property
    def ssh_keys(self) -> Collection:
        return Collection(self, "/v1/ssh-keys")

    @property
    def volumes(self) -> Collection:
        return Collection(self, "/v1/volumes")

    @property
    def reserved_ips(self) -> Collection:
        return Collection(self, "/v1/reserved-ips")

    @property
    def budgets(self) -> Collection:
        return Collection(self, "/v1/budgets")

    @property
    def security_groups(self) -> Collection:
        return Collection(self, "/v1/security-groups")

    @property
    def reservations(self) -> Collection:
        return Collection(self, "/v1/reservations")

    @property
    def clusters(self) -> Collection:
        return Collection(self, "/v1/clusters")

    # ---- credentials -------------------------------------------------------------------------------

    def verify_credentials(self) -> None:
        """One cheap authenticated read: raises Unauthorized/Forbidden when the key is missing or rejected."""
        self.request("GET", "/v1/ssh-keys", params={"page_size": 1})

    # ---- SSH keys ----------------------------------------------------------------------------------

    def create_ssh_key(self, *, name: str, public_key: str, idempotency_key: str) -> Body:
        body = {"name": name, "public_key": public_key}
        return self._body(self.request("POST", "/v1/ssh-keys", json=body, idempotency_key=idempotency_key))

    def get_ssh_key(self, ssh_key_id: str) -> Body:
        return self._body(self.request("GET", f"/v1/ssh-keys/{_seg(ssh_key_id)}"))

    def list_ssh_keys(self, *, name: str | None = None) -> list[Body]:
        return list(self.iter_items("/v1/ssh-keys", {"name": name}))

    def update_ssh_key(self, ssh_key_id: str, *, name: str, if_match: str | None = None) -> Body:
        path = f"/v1/ssh-keys/{_seg(ssh_key_id)}"
        return self._body(self.request("PATCH", path, json={"name": name}, if_match=if_match))

    def delete_ssh_key(self, ssh_key_id: str, *, if_match: str | None = None) -> None:
        self.request("DELETE", f"/v1/ssh-keys/{_seg(ssh_key_id)}", if_match=if_match)

    # ---- volumes -----------------------------------------------------------------------------------

    def create_volume(self, *, name: str, region: str, size_tib: int, idempotency_key: str) -> Body:
        body = {"name": name, "region": region, "size_tib": size_tib}
        return self._body(self.request("POST", "/v1/volumes", json=body, idempotency_key=idempotency_key))

    def get_volume(self, volume_id: str) -> Body:
        return self._body(self.request("GET", f"/v1/volumes/{_seg(volume_id)}"))

    def list_volumes(self, *, name: str | None = None, region: str | None = None) -> list[Body]:
        return list(self.iter_items("/v1/volumes", {"name": name, "region": region}))

    def update_volume(
        self,
        volume_id: str,
        *,
        name: str | None = None,
        size_tib: int | None = None,
        if_match: str | None = None,
    ) -> Body:
        """Rename and/or grow (the API refuses to shrink). Only the given fields are sent."""
        changes = {k: v for k, v in (("name", name), ("size_tib", size_tib)) if v is not None}
        path = f"/v1/volumes/{_seg(volume_id)}"
        return self._body(self.request("PATCH", path, json=changes, if_match=if_match))

    def delete_volume(self, volume_id: str, *, if_match: str | None = None) -> None:
        self.request("DELETE", f"/v1/volumes/{_seg(volume_id)}", if_match=if_match)

    # ---- security groups ---------------------------------------------------------------------------

    def create_security_group(self, body: Mapping[str, Any], *, idempotency_key: str) -> Body:
        """`{name, description, ingress, egress}`; a rule is `{protocol, from_port, to_port, cidr_blocks,
        description}`."""
        return self._body(self.security_groups.create(body, idempotency_key=idempotency_key))

    def get_security_group(self, security_group_id: str) -> Body:
        return self._body(self.security_groups.get(security_group_id))

    def list_security_groups(self, *, name: str | None = None) -> list[Body]:
        return list(self.security_groups.items(name=name))

    def update_security_group(
        self, security_group_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Body:
        """Partial update; a rule list given replaces the whole list."""
        return self._body(self.security_groups.update(security_group_id, changes, if_match=if_match))

    def delete_security_group(self, security_group_id: str, *, if_match: str | None = None) -> None:
        self.security_groups.delete(security_group_id, if_match=if_match)

    # ---- reserved IPs ------------------------------------------------------------------------------

    def create_reserved_ip(self, body: Mapping[str, Any], *, idempotency_key: str) -> Body:
        """`{region, name, labels}`: an address of the region's public pool, the project's until released."""
        return self._body(self.reserved_ips.create(body, idempotency_key=idempotency_key))

    def get_reserved_ip(self, reserved_ip_id: str) -> Body:
        return self._body(self.request("GET", f"/v1/reserved-ips/{_seg(reserved_ip_id)}"))

    def list_reserved_ips(self, *, name: str | None = None) -> list[Body]:
        return list(self.reserved_ips.items(name=name))

    def update_reserved_ip(
        self, reserved_ip_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Body:
        """`name` (null clears it) and/or `labels` (replaced)."""
        return self._body(self.reserved_ips.update(reserved_ip_id, changes, if_match=if_match))

    def delete_reserved_ip(self, reserved_ip_id: str, *, if_match: str | None = None) -> None:
        """Release the address to the pool (409 `reserved_ip_attached` while a cluster holds it)."""
        self.reserved_ips.delete(reserved_ip_id, if_match=if_match)

    # ---- reservations ------------------------------------------------------------------------------

    def create_reservation(self, body: Mapping[str, Any], *, idempotency_key: str) -> Body:
        """`{name, region, instance_type, node_count, duration_days, starts_at, labels}`: prices the term
        and holds its nodes."""
        return self._body(self.reservations.create(body, idempotency_key=idempotency_key))

    def get_reservation(self, reservation_id: str) -> Body:
        return self._body(self.reservations.get(reservation_id))

    def list_reservations(self) -> list[Body]:
        return list(self.reservations.items())

    def update_reservation(
        self, reservation_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Body:
        """`name` and/or `labels` (replaced): nothing priced or held changes in place."""
        return self._body(self.reservations.update(reservation_id, changes, if_match=if_match))

    def delete_reservation(self, reservation_id: str) -> None:
        """Give the capacity back early (no refund once started; 409 while clusters draw from it)."""
        self.reservations.delete(reservation_id)

    # ---- budgets -----------------------------------------------------------------------------------

    def create_budget(self, body: Mapping[str, Any], *, idempotency_key: str) -> Body:
        """`{name, amount_usd, label_filter, thresholds, action}` (a monthly amount)."""
        return self._body(self.budgets.create(body, idempotency_key=idempotency_key))

    def get_budget(self, budget_id: str) -> Body:
        return self._body(self.budgets.get(budget_id))

    def list_budgets(self) -> list[Body]:
        return list(self.budgets.items())

    def update_budget(
        self, budget_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Body:
        """Partial update; `label_filter: null` widens it to the project."""
        return self._body(self.budgets.update(budget_id, changes, if_match=if_match))

    def delete_budget(self, budget_id: str, *, if_match: str | None = None) -> None:
        self.budgets.delete(budget_id, if_match=if_match)

    # ---- clusters ----------------------------------------------------------------------------------

    def create_cluster(self, spec: Mapping[str, Any], *, idempotency_key: str) -> Body:
        """Create from a spec (name, region, instance_type, node_count, orchestrator, interconnect,
        container, ssh_key_ids, volume_ids, billing, labels, deletion_protection, max_hourly_cost_usd).
        Returns at once with the cluster in a non-terminal status: poll with `wait_for`."""
        return self._body(
            self.request("POST", "/v1/clusters", json=dict(spec), idempotency_key=idempotency_key)
        )

    def get_cluster(self, cluster_id: str) -> Body:
        return self._body(self.request("GET", f"/v1/clusters/{_seg(cluster_id)}"))

    def list_clusters(self, *, name: str | None = None) -> list[Body]:
        return list(self.iter_items("/v1/clusters", {"name": name}))

    def update_cluster(
        self, cluster_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Body:
        """Partial update: absent fields keep their value."""
        path = f"/v1/clusters/{_seg(cluster_id)}"
        return self._body(self.request("PATCH", path, json=dict(changes), if_match=if_match))

    def delete_cluster(self, cluster_id: str, *, if_match: str | None = None) -> Body | None:
        """Request deletion; returns the cluster (now DESTROYING) when the API sends it back."""
        response = self.request("DELETE", f"/v1/clusters/{_seg(cluster_id)}", if_match=if_match)
        return response.body if isinstance(response.body, dict) else None

    def attach_volume(self, cluster_id: str, volume_id: str, *, idempotency_key: str | None = None) -> Body:
        """Attach a shared volume. One key serves every retry of this call (a fresh one if none given)."""
        path = f"/v1/clusters/{_seg(cluster_id)}/volumes/{_seg(volume_id)}"
        key = idempotency_key or new_idempotency_key()
        return self._body(self.request("POST", path, idempotency_key=key))

    def detach_volume(self, cluster_id: str, volume_id: str) -> Body:
        path = f"/v1/clusters/{_seg(cluster_id)}/volumes/{_seg(volume_id)}"
        return self._body(self.request("DELETE", path))

    def list_cluster_nodes(self, cluster_id: str, *, health: str | None = None) -> Body:
        """The cluster's nodes with health, orchestrator state and GPU readings (`items`, `counts`);
        `health`: failed, xid or healthy nodes only (the counts are over every node)."""
        path = f"/v1/clusters/{_seg(cluster_id)}/nodes"
        return self._body(self.request("GET", path, params={"health": health}))

    def scale_down_preview(self, cluster_id: str, node_count: int) -> Body:
        """What a scale-down to `node_count` would do (read-only): `nodes` that go, each with its
        `running_jobs`, `summary`, `scale_down_grace_minutes`, `workload_known`."""
        path = f"/v1/clusters/{_seg(cluster_id)}/scale-down-preview"
        return self._body(self.request("GET", path, params={"node_count": node_count}, side_effect_free=True))

    def list_node_events(self, cluster_id: str, node: str, *, limit: int | None = None) -> list[Body]:
        """The node's history, newest first (faults with their XID code, repairs, restarts, node actions
        and who asked), across every machine that held the name; `limit`: only the newest ones."""
        path = f"/v1/clusters/{_seg(cluster_id)}/nodes/{_seg(node)}/events"
        page_size = min(limit, 100) if limit else 100
        return list(itertools.islice(self.iter_items(path, page_size=page_size), limit))

    def node_action(self, cluster_id: str, node: str, action: str, *, idempotency_key: str) -> Body:
        """restart, replace, drain or resume one node (admin); answers `{action, node}`."""
        path = f"/v1/clusters/{_seg(cluster_id)}/nodes/{_seg(node)}/actions"
        return self._post_action(path, action, idempotency_key)

    def cluster_action(self, cluster_id: str, action: str, *, idempotency_key: str) -> Body:
        """A cluster-wide action (restart_workers); answers `{action, nodes}`, the nodes it touched."""
        return self._post_action(f"/v1/clusters/{_seg(cluster_id)}/actions", action, idempotency_key)

    def list_cluster_jobs(
        self, cluster_id: str, *, state: str | None = None, limit: int | None = None
    ) -> Body:
        """The scheduler's job table, newest first (`items`), `counts` per state and `partitions`."""
        path = f"/v1/clusters/{_seg(cluster_id)}/jobs"
        return self._body(self.request("GET", path, params={"state": state, "limit": limit}))

    def get_cluster_logs(
        self, cluster_id: str, *, source: str = "controller", tail: int | None = None
    ) -> Body:
        """The last lines (`{source, lines}`) of the controller's log, or of a node's (`source`: its name)."""
        path = f"/v1/clusters/{_seg(cluster_id)}/logs"
        return self._body(self.request("GET", path, params={"source": source, "tail": tail}))

    def follow_cluster_logs(
        self, cluster_id: str, *, source: str = "controller", tail: int | None = None
    ) -> Iterator[str]:
        """The last lines of a log, then each new line as it is written, until the server ends the stream
        (after some minutes: call again for more) or the caller stops iterating."""
        path = f"/v1/clusters/{_seg(cluster_id)}/logs"
        return self.stream_events(path, params={"source": source, "tail": tail, "follow": True})

    def get_cluster_artifact(self, cluster_id: str, file: str) -> str:
        """A generated file of the cluster (e.g. slurm.conf, topology.conf), as text."""
        return self.request_text("GET", f"/v1/clusters/{_seg(cluster_id)}/artifacts/{_seg(file)}")

    def get_cluster_credentials(self, cluster_id: str) -> Body:
        """The admin kubeconfig, its API endpoint and `expires_at` (its token is a lease); admin only,
        audited, never in get/list."""
        return self._body(self.request("GET", f"/v1/clusters/{_seg(cluster_id)}/credentials"))

    def renew_cluster_credentials(self, cluster_id: str) -> Body:
        """Extend the kubeconfig token's lease; answers the new `expires_at` (409 once it lapsed).
        Retried like a read: renewing twice extends to the same horizon."""
        path = f"/v1/clusters/{_seg(cluster_id)}/credentials/renew"
        return self._body(self.request("POST", path, side_effect_free=True))

    # ---- catalog and pricing -----------------------------------------------------------------------

    def list_regions(self) -> list[Body]:
        return list(self.iter_items("/v1/regions"))

    def list_instance_types(
        self, *, region: str | None = None, gpu: str | None = None, min_gpus: int | None = None
    ) -> list[Body]:
        return list(
            self.iter_items("/v1/instance-types", {"region": region, "gpu": gpu, "min_gpus": min_gpus})
        )

    def estimate_price(self, spec: Mapping[str, Any]) -> Body:
        """Hourly (and reserved up-front) cost of a cluster spec. A POST without side effects: retried."""
        return self._body(
            self.request("POST", "/v1/pricing/estimate", json=dict(spec), side_effect_free=True)
        )

    def get_quotas(self) -> Body:
        """The project's quotas (null: no limit) and what it holds now."""
        return self._body(self.request("GET", "/v1/quotas"))

    # ---- billing -----------------------------------------------------------------------------------

    def get_balance(self) -> Body:
        return self._body(self.request("GET", "/v1/billing/balance"))

    def list_usage(self, **filters: Any) -> list[Body]:
        return list(self.iter_items("/v1/billing/usage", filters))

    def list_invoices(self) -> list[Body]:
        return list(self.iter_items("/v1/billing/invoices"))

    def add_credits(self, body: Mapping[str, Any], *, idempotency_key: str) -> Body:
        return self._body(
            self.request("POST", "/v1/billing/credits", json=dict(body), idempotency_key=idempotency_key)
        )

    # ---- helpers -----------------------------------------------------------------------------------

    def _post_action(self, path: str, action: str, idempotency_key: str) -> Body:
        return self._body(
            self.request("POST", path, json={"action": action}, idempotency_key=idempotency_key)
        )

    @staticmethod
    def _body(response: ApiResponse) -> Body:
        """The JSON object a single-object endpoint must answer with."""
        if not isinstance(response.body, dict):
            raise ServerError(
                status=response.status,
                code="malformed_response",
                detail="the API answered without the expected JSON object",
            )
        return response.body
