"""gpucloud_ssh_key: an OpenSSH public key registered with the project, for cluster logins."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.framework import (
    Context,
    DiagnosticError,
    NormalizedStringType,
    Schema,
    State,
    StringAttribute,
    collapse_whitespace,
    requires_replace,
    rfc3339_utc,
    root,
    use_state_for_unknown,
)
from provider.resources._common import api_id_identity, conflict_existing_id
from provider.resources.api_rules import field_validators
from provider.resources.rest import RestResource

NAME_RULE = "must be 1-128 printable characters without leading or trailing spaces"


def normalize_public_key(text: str) -> str:
    """The key line without surrounding whitespace, inner runs of blanks collapsed: what identifies it."""
    return collapse_whitespace(text)


# A trailing newline from `file()` or doubled spaces are not another key.
SAME_KEY = NormalizedStringType(
    normalize_public_key, "Whitespace-only differences (such as a trailing newline) are not a change."
)


class SshKeyResource(RestResource):
    type_name = "gpucloud_ssh_key"
    subject = "SSH key"
    title = "SSH Key"
    blocking_plan = False  # planning calls no API (only create/read/update/delete do)
    import_id_attribute = "id"
    identity_schema = api_id_identity("SSH key", "ssh")
    schema = Schema(
        description="An SSH public key registered with the project. Clusters install the keys listed in "
        "their `ssh_key_ids` for logins. The key material cannot change: a new key replaces the resource.",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name of the key. Renaming is done in place.",
                validators=field_validators("SshKeyCreate", "name", text={"pattern": NAME_RULE}),
            ),
            "public_key": StringAttribute(
                required=True,
                description="The OpenSSH public key line, for example `file(\"~/.ssh/id_ed25519.pub\")`: "
                "`ssh-ed25519`, `ecdsa-sha2-nistp256/384/521` or `ssh-rsa` of at least 2048 bits. A trailing "
                "newline or changed whitespace is not a change; a different key replaces the resource. A "
                "private key given by mistake fails the plan without being repeated in the output.",
                validators=field_validators("SshKeyCreate", "public_key"),
                semantic=SAME_KEY,
                plan_modifiers=[requires_replace()],
            ),
            # Computed
            "id": StringAttribute(
                computed=True,
                description="Identifier of the key (`ssh_...`); use it in a cluster's `ssh_key_ids`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "fingerprint": StringAttribute(
                computed=True,
                description="SHA256 fingerprint, as printed by `ssh-keygen -lf`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "key_type": StringAttribute(
                computed=True,
                description="Key algorithm, for example `ssh-ed25519`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "created_at": StringAttribute(
                computed=True,
                description="When the key was registered (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
        },
    )

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.ssh_keys

    def create_body(self, values: State) -> dict[str, Any]:
        return {"name": values["name"], "public_key": values["public_key"]}

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return self.state_from_api(body)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        if plan["name"] == state["name"]:
            return {**state, "public_key": plan["public_key"]}  # nothing to send
        return self.patch(ctx, plan, state, {"name": plan["name"]})

    def create_refused(self, ctx: Context, error: ApiError) -> None:
        existing = conflict_existing_id(error)
        if existing is None:
            super().create_refused(ctx, error)
            return
        raise DiagnosticError(
            "SSH Key Already Registered",
            f"This public key is already registered in the project as {existing}. Use that key's id, or "
            f"bring it under Terraform with: terraform import <address> {existing}",
            root("public_key"),
        )

    @staticmethod
    def state_from_api(body: Any) -> State:
        """The state of an API object (`terraform query` builds states of keys it finds with it); the
        prior spelling of the same key is kept by its semantic type."""
        if not isinstance(body, dict):
            raise DiagnosticError("Unexpected API Response", "The API answered without an SSH key object.")
        return {
            "id": body["id"],
            "name": body["name"],
            "public_key": str(body["public_key"]),
            "fingerprint": body["fingerprint"],
            "key_type": body["key_type"],
            "created_at": rfc3339_utc(body["created_at"]),
        }

