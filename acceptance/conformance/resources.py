"""The small conformance resources: simple (benchmark), versioned (state upgrade), slow (Ctrl-C and
timeouts), failing (internal errors), renamed (moved {} across types)."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

from provider.framework import (
    Context,
    DiagnosticError,
    Identity,
    IdentityAttribute,
    IdentitySchema,
    IdentityUpgrader,
    Int64Attribute,
    MoveSource,
    NumberAttribute,
    Resource,
    Schema,
    State,
    StateUpgrader,
    StringAttribute,
    requires_replace,
    root,
    timeout,
    timeouts_block,
    use_state_for_unknown,
)
from provider.framework.validators import string_one_of

VERSION_ENV = "CONFORMANCE_VERSIONED_SCHEMA"


def _id_attribute() -> StringAttribute:
    return StringAttribute(computed=True, description="Identifier.", plan_modifiers=[use_state_for_unknown()])


def _new_id() -> str:
    """16 random hex digits (os.urandom: `uuid` costs the provider's start-up ~1.5 ms of imports)."""
    return os.urandom(8).hex()


class SimpleResource(Resource):
    """Required `value`, computed `id`; no remote object (used by the plan/apply benchmark)."""

    type_name = "conformance_simple"
    blocking = False  # no remote object: nothing to wait for
    schema = Schema(
        description="The smallest resource: a value and an id.",
        attributes={
            "id": _id_attribute(),
            "value": StringAttribute(required=True, description="Any string."),
        },
    )

    def create(self, ctx: Context, plan: State) -> State:
        return {**plan, "id": _new_id()}

    def update(self, ctx: Context, plan: State, state: State) -> State:
        return plan

    def delete(self, ctx: Context, state: State) -> None:
        return None


V0 = Schema(
    version=0,
    attributes={"id": _id_attribute(), "title": StringAttribute(required=True, description="Title.")},
)
V1 = Schema(
    version=1,
    description="Schema version switched by the CONFORMANCE_VERSIONED_SCHEMA environment variable.",
    attributes={
        "id": _id_attribute(),
        "name": StringAttribute(required=True, description="Name (was `title` in version 0)."),
        "size": Int64Attribute(optional=True, computed=True, default=1, description="Added in version 1."),
    },
)


IDENTITY_V0 = IdentitySchema({"id": IdentityAttribute(description="Identifier.")})
IDENTITY_V1 = IdentitySchema(
    {
        "id": IdentityAttribute(description="Identifier."),
        "kind": IdentityAttribute(required_for_import=False, description="Always `versioned` (added in 1)."),
    },
    version=1,
)


class VersionedResource(Resource):
    """State and identity versions switched together by CONFORMANCE_VERSIONED_SCHEMA (0 or 1)."""

    type_name = "conformance_versioned"

    def __init__(self) -> None:
        old = os.environ.get(VERSION_ENV, "1") == "0"
        self.schema = V0 if old else V1
        self.identity_schema = IDENTITY_V0 if old else IDENTITY_V1

    def identity(self, ctx: Context, state: State) -> Identity | None:
        return super().identity(ctx, {**state, "kind": "versioned"})

    def create(self, ctx: Context, plan: State) -> State:
        return {**plan, "id": _new_id()}

    def update(self, ctx: Context, plan: State, state: State) -> State:
        return plan

    def delete(self, ctx: Context, state: State) -> None:
        return None

    def state_upgraders(self) -> dict[int, StateUpgrader]:
        # version 1 renamed title to name and added size (default 1, so the upgraded state plans clean)
        return {
            0: StateUpgrader(
                lambda ctx, old: {"id": old["id"], "name": old["title"], "size": 1}, prior_schema=V0
            )
        }

    def identity_upgraders(self) -> dict[int, IdentityUpgrader]:
        return {0: IdentityUpgrader(lambda old: {"id": old["id"], "kind": "versioned"})}


class SlowResource(Resource):
    """Create waits `seconds` (cancellable by Ctrl-C, bounded by `timeouts.create`)."""

    type_name = "conformance_slow"
    schema = Schema(
        attributes={
            "id": _id_attribute(),
            "seconds": NumberAttribute(
                required=True, description="How long create takes.", plan_modifiers=[requires_replace()]
            ),
        },
        blocks={"timeouts": timeouts_block(create=True, defaults={"create": "10m"})},
    )

    def create(self, ctx: Context, plan: State) -> State:
        limit = timeout(plan, "create", dt.timedelta(minutes=10)).total_seconds()
        wanted = float(plan["seconds"])
        deadline = time.monotonic() + min(wanted, limit)
        ctx.wait_until(deadline)
        if wanted > limit:
            raise DiagnosticError(
                "Timed Out Creating Slow Resource",
                f"create did not finish within the {limit:g}s create timeout; raise "
                "timeouts.create or lower seconds.",
                root("timeouts"),
            )
        return {**plan, "id": _new_id()}

    def update(self, ctx: Context, plan: State, state: State) -> State:
        return plan

    def delete(self, ctx: Context, state: State) -> None:
        return None


class FailingResource(Resource):
    """Has a bug on purpose (in plan or in apply): the framework must turn it into a diagnostic."""

    type_name = "conformance_failing"
    schema = Schema(
        attributes={
            "id": _id_attribute(),
            "fail_in": StringAttribute(
                required=True, description="`plan` or `apply`.", validators=[string_one_of("plan", "apply")]
            ),
        }
    )

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        if plan is not None and plan["fail_in"] == "plan":
            bugs: dict[str, State] = {}
            return bugs["deliberate bug in modify_plan"]
        return plan

    def create(self, ctx: Context, plan: State) -> State:
        raise ZeroDivisionError("deliberate bug in create")

    def delete(self, ctx: Context, state: State) -> None:
        return None


class RenamedResource(Resource):
    """Takes over `conformance_simple` objects through `moved {}` (MoveResourceState)."""

    type_name = "conformance_renamed"
    schema = Schema(
        attributes={"id": _id_attribute(), "text": StringAttribute(required=True, description="Text.")}
    )

    def create(self, ctx: Context, plan: State) -> State:
        return {**plan, "id": _new_id()}

    def update(self, ctx: Context, plan: State, state: State) -> State:
        return plan

    def delete(self, ctx: Context, state: State) -> None:
        return None

    def move_state(self, ctx: Context, source: MoveSource) -> State | None:
        if source.type_name != "conformance_simple" or not source.provider_address.endswith("/conformance"):
            return None
        state: dict[str, Any] = source.state
        return {"id": state["id"], "text": state["value"]}
