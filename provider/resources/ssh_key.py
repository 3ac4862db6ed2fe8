"""gpucloud_ssh_key: an OpenSSH public key registered with the project, for cluster logins."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError
from provider.framework import (
    Context,
    DiagnosticError,
    PlanModification,
    Resource,
    Schema,
    State,
    StringAttribute,
    requires_replace,
    root,
    use_state_for_unknown,
)
from provider.resources._common import (
    UNCONFIRMED_CREATE,
    api_error,
    api_id_identity,
    client_of,
    configured,
    conflict_existing_id,
    create_done,
    create_key,
    etag_of,
    get_with_etag,
    is_unconfirmed,
    keep_unconfirmed,
    object_id_for_delete,
    outcome_unknown,
    plan_create_key,
    remember_etag,
    timestamp,
)
from provider.resources.api_rules import field_validators

NAME_RULE = "must be 1-128 printable characters without leading or trailing spaces"


def normalize_public_key(text: str) -> str:
    """The key line without surrounding whitespace, inner runs of blanks collapsed: what identifies it."""
    return " ".join(text.split())


class KeepPriorWhenSameKey:
    """Semantic equality: a public key that differs from the stored one only in whitespace (a trailing
    newline from `file()`, doubled spaces) plans the prior spelling, so there is no diff and no replace."""

    description = "Whitespace-only differences (such as a trailing newline) are not a change."

    def modify(self, m: PlanModification) -> None:
        prior, planned = m.state_value, m.plan_value
        if m.creating or not isinstance(prior, str) or not isinstance(planned, str):
            return
        if prior != planned and normalize_public_key(prior) == normalize_public_key(planned):
            m.plan_value = prior


def keep_prior_when_same_key() -> KeepPriorWhenSameKey:
    return KeepPriorWhenSameKey()


def _path(ssh_key_id: str) -> str:
    return f"/v1/ssh-keys/{ssh_key_id}"


class SshKeyResource(Resource):
    type_name = "gpucloud_ssh_key"
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
                plan_modifiers=[keep_prior_when_same_key(), requires_replace()],
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

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        plan_create_key(ctx, state, plan)
        return plan

    def create(self, ctx: Context, plan: State) -> State | None:
        key = create_key(ctx)  # every retry of this create replays the first outcome
        try:
            response = client_of(ctx).request(
                "POST",
                "/v1/ssh-keys",
                json={"name": plan["name"], "public_key": plan["public_key"]},
                idempotency_key=key,
            )
        except ApiError as error:
            if outcome_unknown(error):
                api_error(ctx, "Error Creating SSH Key", error, subject="SSH key", extra=UNCONFIRMED_CREATE)
                return keep_unconfirmed(ctx, self.schema, plan)
            self._create_error(ctx, error)
            return None
        create_done(ctx)
        remember_etag(ctx, response.etag)
        return self._state(response.body, plan)

    def read(self, ctx: Context, state: State) -> State | None:
        if not configured(ctx) or is_unconfirmed(state):
            return state  # provider block not known yet, or an unconfirmed create: nothing to read
        try:
            body = get_with_etag(ctx, _path(state["id"]))
        except ApiError as error:
            api_error(ctx, "Error Reading SSH Key", error, subject="SSH key")
            return state
        return None if body is None else self._state(body, state)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        if plan["name"] == state["name"]:
            return {**state, "public_key": plan["public_key"]}  # nothing to send
        try:
            response = client_of(ctx).request(
                "PATCH", _path(state["id"]), json={"name": plan["name"]}, if_match=etag_of(ctx)
            )
        except ApiError as error:
            api_error(ctx, "Error Updating SSH Key", error, subject="SSH key", schema=self.schema)
            return None
        remember_etag(ctx, response.etag)
        return self._state(response.body, plan)

    def delete(self, ctx: Context, state: State) -> None:
        try:
            ssh_key_id = object_id_for_delete(
                ctx, state, "/v1/ssh-keys", {"name": state["name"], "public_key": state["public_key"]}
            )
            if ssh_key_id is None:
                return  # an unconfirmed create that made nothing
            client_of(ctx).request("DELETE", _path(ssh_key_id), if_match=etag_of(ctx))
        except ApiError as error:
            if error.status == 404:
                return  # already gone: the goal of a delete
            api_error(ctx, "Error Deleting SSH Key", error, subject="SSH key")

    def _create_error(self, ctx: Context, error: ApiError) -> None:
        existing = conflict_existing_id(error)
        if existing is None:
            api_error(ctx, "Error Creating SSH Key", error, subject="SSH key", schema=self.schema)
            return
        raise DiagnosticError(
            "SSH Key Already Registered",
            f"This public key is already registered in the project as {existing}. Use that key's id, or "
            f"bring it under Terraform with: terraform import <address> {existing}",
            root("public_key"),
        )

    @staticmethod
    def state_from_api(body: Any, prior: State) -> State:
        """The state of an API object (`terraform query` builds states of keys it finds with it)."""
        return SshKeyResource._state(body, prior)

    @staticmethod
    def _state(body: Any, prior: State) -> State:
        """State from the API object; the prior spelling of the key stays when it is the same key."""
        if not isinstance(body, dict):
            raise DiagnosticError("Unexpected API Response", "The API answered without an SSH key object.")
        remote_key = str(body["public_key"])
        known = prior.get("public_key")
        same = isinstance(known, str) and normalize_public_key(known) == normalize_public_key(remote_key)
        return {
            "id": body["id"],
            "name": body["name"],
            "public_key": known if same else remote_key,
            "fingerprint": body["fingerprint"],
            "key_type": body["key_type"],
            "created_at": timestamp(body["created_at"]),
        }

