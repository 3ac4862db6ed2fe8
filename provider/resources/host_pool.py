"""gpucloud_host_pool: the user's own Linux servers, which the backend reaches over SSH, checks and lists.

The private key is given one of two ways: `ssh_private_key_wo` (write-only, Terraform 1.11+: never in
plan or state; `ssh_private_key_wo_version` says when to send it again) or `ssh_private_key` (sensitive,
kept in state). The API never returns it. Create does not wait for the hosts' checks (a host may stay
unreachable for a while): `status` and `host_status` are what the last read saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING, AttributePath, format_path, is_unknown
from provider.framework import (
    BoolAttribute,
    Context,
    DiagnosticError,
    Int64Attribute,
    ListNestedAttribute,
    MapAttribute,
    Schema,
    State,
    StringAttribute,
    requires_replace,
    rfc3339_utc,
    root,
    use_state_for_unknown,
    use_state_for_unknown_unless_changed,
)
from provider.framework.diagnostics import Diagnostics
from provider.framework.validators import exactly_one_of
from provider.resources._common import api_id_identity
from provider.resources.api_rules import constraints
from provider.resources.host_pool_hosts import (
    HOST_INPUT,
    HOST_STATUS,
    computed,
    configured_hosts,
    host_status,
    hosts_body,
    pool_rules,
)
from provider.resources.rest import RestResource, is_unconfirmed
from provider.resources.ssh_key import NAME_RULE

SUBJECT = "host pool"
API_PATH = "/v1/host-pools"
KEY = "ssh_private_key"
KEY_WO = "ssh_private_key_wo"
KEY_WO_VERSION = "ssh_private_key_wo_version"
# What the API changes in place (PATCH); region cannot change.
PATCHABLE = ("name", "ssh_user", "ssh_port", "proxy_jump", "shared_storage_path", "install_packages")
REGION_RULE = "must start with a lowercase letter, then up to 62 lowercase letters, digits or '-'"
LABEL_RULES = {
    "keys": "key must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', starting and ending with a "
    "letter or digit",
    "values": "must have no control characters",
}


class SecretLength:
    """The contract's length bounds of the private key, reported without the value (a secret)."""

    def __init__(self, field: str) -> None:
        bounds = constraints("HostPoolCreate", field)
        self.min, self.max = int(bounds["minLength"]), int(bounds["maxLength"])
        self.description = f"must be {self.min} to {self.max} characters: the whole private key file"

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if isinstance(value, str) and not is_unknown(value) and not self.min <= len(value) <= self.max:
            detail = f"Attribute {format_path(path)} {self.description} (got {len(value)} characters)."
            diags.error("Invalid Attribute Value Length", detail, path)


def host_pools(client: GpuCloudClient) -> Collection:
    return Collection(client, API_PATH)


class HostPoolResource(RestResource):
    type_name = "gpucloud_host_pool"
    subject = SUBJECT
    title = "Host Pool"
    blocking_plan = False  # planning calls no API (only create/read/update/delete do)
    import_id_attribute = "id"
    identity_schema = api_id_identity(SUBJECT, "hpl")
    config_validators = (exactly_one_of(KEY, KEY_WO),)
    write_only_alternatives = {KEY_WO: KEY}
    schema = Schema(
        description="A host pool: Linux servers of your own that the backend reaches over SSH with the "
        "pool's private key (put the `ssh_public_key` it reports into each host's `authorized_keys`). The "
        "backend checks every host shortly after a create or change and every 5 minutes after that "
        "(reachable, Linux, sudo, Slurm/munge packages, clock) and records its inventory (CPUs, memory, "
        "GPUs, interconnect). Applying does not wait for those checks: `status` and `host_status` show what "
        "the last read saw, and `terraform refresh` or the next plan updates them. Give the private key "
        "either as `ssh_private_key_wo` (Terraform 1.11+, never stored in plan or state) or as "
        "`ssh_private_key` (stored in state, marked sensitive).",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name. Changes in place.",
                validators=pool_rules("name", pattern=NAME_RULE),
            ),
            "region": StringAttribute(
                required=True,
                description="Where the servers are, a name of your choice such as `on-prem-berlin` "
                "(lowercase letters, digits and `-`; not a catalog region). Changing it replaces the pool.",
                validators=pool_rules("region", pattern=REGION_RULE),
                plan_modifiers=[requires_replace()],
            ),
            "hosts": ListNestedAttribute(
                required=True,
                description="The servers, 1 to 64, in the order given; each (address, port) once. Changes "
                "in place: hosts kept keep what was recorded about them, new ones are checked, removed "
                "ones are dropped.",
                attributes=HOST_INPUT,
                validators=pool_rules("hosts"),
            ),
            # Optional
            "ssh_user": StringAttribute(
                optional=True, computed=True, default="root",
                description="User the backend logs in as; any user but `root` needs passwordless sudo. "
                "Changes in place and re-checks every host.",
                validators=pool_rules("ssh_user", pattern="must be a POSIX user name such as root or ubuntu"),
            ),
            "ssh_port": Int64Attribute(
                optional=True, computed=True, default=22,
                description="SSH port of every host without its own `port`. Changes in place and re-checks "
                "every host.",
                validators=pool_rules("ssh_port"),
            ),
            KEY_WO: StringAttribute(
                optional=True, sensitive=True, write_only=True, validators=[SecretLength(KEY)],
                description="The private key the backend connects with, write-only: sent to the API, never "
                "stored in plan or state (Terraform 1.11+). An unencrypted ed25519, ECDSA or RSA (2048 bits "
                "or more) key, the whole file, e.g. `file(\"~/.ssh/gpucloud_pool\")` or an ephemeral value. "
                "Terraform cannot see a change to it: bump `ssh_private_key_wo_version` to send a new key. "
                "Set this or `ssh_private_key`.",
            ),
            KEY_WO_VERSION: StringAttribute(
                optional=True,
                description="Any number or text; changing it sends `ssh_private_key_wo` again (a new key "
                "re-checks every host). Use it with `ssh_private_key_wo`.",
            ),
            KEY: StringAttribute(
                optional=True, sensitive=True, validators=[SecretLength(KEY)],
                description="The private key the backend connects with, stored in state (marked "
                "sensitive): use it only where `ssh_private_key_wo` is not available (Terraform before "
                "1.11). Same format as `ssh_private_key_wo`. Changes in place and re-checks every host.",
            ),
            "proxy_jump": StringAttribute(
                optional=True,
                description="Bastion to connect through, `[user@]host[:port]`, reached with the same key. "
                "Changes in place and re-checks every host.",
                validators=pool_rules("proxy_jump"),
            ),
            "shared_storage_path": StringAttribute(
                optional=True,
                description="Absolute path mounted on every host (NFS, Lustre), such as `/mnt/shared`, "
                "where volumes live. Changes in place.",
                validators=pool_rules("shared_storage_path"),
            ),
            "install_packages": BoolAttribute(
                optional=True, computed=True, default=False,
                description="Whether missing Slurm/munge packages (and slurmdbd and mariadb-server, for "
                "accounting) are installed with the host's apt-get or dnf; when false, a host missing Slurm "
                "or munge is `degraded` (`package_missing`). Changes in place and re-checks every host.",
            ),
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Free-form key/value tags (up to 64). Changes in place.",
                validators=pool_rules("labels", **LABEL_RULES),
            ),
            # Computed
            "id": StringAttribute(
                computed=True, description="Identifier of the pool (`hpl_...`).",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "ssh_public_key": StringAttribute(
                computed=True,
                description="Public half of the pool's key, to add to `~/.ssh/authorized_keys` of "
                "`ssh_user` on every host.",
                plan_modifiers=[use_state_for_unknown_unless_changed(KEY, KEY_WO_VERSION)],
            ),
            "ssh_key_fingerprint": StringAttribute(
                computed=True,
                description="SHA256 fingerprint of the pool's key, as `ssh-keygen -lf` prints it.",
                plan_modifiers=[use_state_for_unknown_unless_changed(KEY, KEY_WO_VERSION)],
            ),
            "status": computed(
                "`probing` (no host ready, some not checked yet), `ready` (at least one host ready) or "
                "`unavailable` (every host checked, none ready), as last read."
            ),
            "ready_hosts": computed("Hosts ready, as last read.", Int64Attribute),
            "free_hosts": computed("Ready hosts no cluster uses, as last read.", Int64Attribute),
            "host_status": ListNestedAttribute(
                computed=True,
                description="What the last check found on each host, in the order of `hosts`.",
                attributes=HOST_STATUS,
            ),
            "created_at": StringAttribute(
                computed=True, description="When the pool was created (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
        },
    )

    # ---- configuration -----------------------------------------------------------------------------

    def validate_config(self, ctx: Context, config: State) -> None:
        if config.get(KEY_WO_VERSION) is not None and config.get(KEY) is not None:
            ctx.error(
                "Invalid Attribute Combination",
                f"{KEY_WO_VERSION} versions {KEY_WO}, but the key is given as {KEY}: remove "
                f"{KEY_WO_VERSION}, or give the key as {KEY_WO} instead.",
                root(KEY_WO_VERSION),
            )

    # ---- CRUD (the create/read/delete policy is RestResource's) ------------------------------------

    def collection(self, client: GpuCloudClient) -> Collection:
        return host_pools(client)

    def create_body(self, values: State) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": values["name"],
            "region": values["region"],
            "hosts": hosts_body(values["hosts"]),
            **{name: values.get(name) for name in PATCHABLE if name != "name"},
        }
        key = values.get(KEY_WO) or values.get(KEY)
        if key is not None:  # absent only when replaying an unconfirmed create (see `delete`)
            body[KEY] = key
        if values.get("labels"):
            body["labels"] = values["labels"]
        return body

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return self._state(body, prior)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes: dict[str, Any] = {
            name: plan.get(name) for name in PATCHABLE if plan.get(name) != state.get(name)
        }
        if (plan.get("labels") or {}) != (state.get("labels") or {}):
            changes["labels"] = plan.get("labels") or {}
        if hosts_body(plan["hosts"]) != hosts_body(state["hosts"]):
            changes["hosts"] = hosts_body(plan["hosts"])
        key = key_to_send(plan, state)
        if key is not None:
            changes[KEY] = key
        if not changes:  # nothing the API holds changed (null labels for an empty map, say): read it
            return self.reread(ctx, plan)
        return self.patch(ctx, plan, state, changes)

    def reread(self, ctx: Context, plan: State) -> State | None:
        """The object as planned, read back (an update with nothing to send)."""
        refreshed = self.read(ctx, plan)
        if ctx.diagnostics.has_errors:
            return None
        if refreshed is None:
            raise DiagnosticError(
                "Error Updating Host Pool",
                "The host pool no longer exists: it was deleted outside Terraform. Run terraform apply "
                "again to create it.",
            )
        return refreshed

    def create(self, ctx: Context, plan: State) -> State | None:
        created = super().create(ctx, plan)
        point_key_errors_at_source(ctx, plan)
        return created

    def patch(self, ctx: Context, plan: State, state: State, changes: Mapping[str, Any]) -> State | None:
        patched = super().patch(ctx, plan, state, changes)
        point_key_errors_at_source(ctx, plan)
        return patched

    def delete(self, ctx: Context, state: State) -> None:
        if is_unconfirmed(state) and state.get(KEY) is None:
            # The create whose outcome is unknown sent a write-only key, which nothing kept: replaying it
            # without the key cannot name what it made.
            ctx.warning(
                "Host Pool Create Never Confirmed",
                f'An earlier create of host pool "{state.get("name")}" may have made a pool that Terraform '
                "cannot name (its write-only key was not kept to replay the create). Look for it with "
                "`gpucloud host-pool list` and delete it there (`gpucloud host-pool delete`) if it exists.",
            )
            return
        super().delete(ctx, state)

    def delete_refused(self, ctx: Context, error: ApiError) -> None:
        if error.code == "host_pool_in_use":
            user = error.extra.get("cluster_id") or "a cluster"
            raise DiagnosticError(
                "Host Pool In Use",
                f"{user} runs on this pool's hosts. Destroy that cluster (or move it off the pool) first, "
                "then destroy the pool.",
            ) from None
        super().delete_refused(ctx, error)

    # ---- API object -> state -----------------------------------------------------------------------

    @staticmethod
    def _state(body: Any, prior: State | None = None) -> State:
        if not isinstance(body, dict):
            raise DiagnosticError("Unexpected API Response", "The API answered without a host pool object.")
        prior = prior or {}
        labels = dict(body.get("labels") or {})
        api_hosts = list(body.get("hosts") or [])
        return {
            "id": body["id"],
            "name": body["name"],
            "region": body["region"],
            "hosts": configured_hosts(api_hosts, prior.get("hosts"), int(body["ssh_port"])),
            "ssh_user": body["ssh_user"],
            "ssh_port": body["ssh_port"],
            # Never returned by the API: the configuration's (or the state's) values stand.
            KEY_WO: None,
            KEY_WO_VERSION: prior.get(KEY_WO_VERSION),
            KEY: prior.get(KEY),
            "proxy_jump": body.get("proxy_jump"),
            "shared_storage_path": body.get("shared_storage_path"),
            "install_packages": bool(body["install_packages"]),
            "labels": labels if labels or prior.get("labels") is not None else None,
            "ssh_public_key": body["ssh_public_key"],
            "ssh_key_fingerprint": body["ssh_key_fingerprint"],
            "status": body["status"],
            "ready_hosts": body["ready_hosts"],
            "free_hosts": body["free_hosts"],
            "host_status": [host_status(h) for h in api_hosts],
            "created_at": rfc3339_utc(body["created_at"]),
        }

    @staticmethod
    def state_from_api(body: Any) -> State:
        """The state of an API object with nothing known before (import, data source)."""
        return HostPoolResource._state(body)


# ---- pieces --------------------------------------------------------------------------------------------


def point_key_errors_at_source(ctx: Context, values: State) -> None:
    """The API names `ssh_private_key` whichever attribute the key came from: errors about a key given as
    `ssh_private_key_wo` point at that attribute."""
    if values.get(KEY_WO) is None:
        return
    for index, diagnostic in enumerate(ctx.diagnostics):
        if diagnostic.path == root(KEY):
            ctx.diagnostics[index] = replace(diagnostic, path=root(KEY_WO))


def key_to_send(plan: State, state: State) -> str | None:
    """The key an update sends: when `ssh_private_key` changes, or `ssh_private_key_wo_version` does (the
    write-only key itself is never planned, so its version is what says it changed)."""
    key_changed = plan.get(KEY) != state.get(KEY)
    version_changed = plan.get(KEY_WO_VERSION) != state.get(KEY_WO_VERSION)
    if not (key_changed or version_changed):
        return None
    key = plan.get(KEY) or plan.get(KEY_WO)
    return key if isinstance(key, str) else None
