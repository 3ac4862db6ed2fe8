"""A tiny provider used by the ProviderServer round-trip tests (in-memory objects)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from provider.cty import NUMBER
from provider.framework import (
    Action,
    Context,
    DataSource,
    EphemeralResource,
    EphemeralResult,
    Function,
    FunctionError,
    IdentityAttribute,
    IdentitySchema,
    IdentityUpgrader,
    Int64Attribute,
    ListResource,
    ListResult,
    MoveSource,
    Parameter,
    Provider,
    Resource,
    Schema,
    StateUpgrader,
    StringAttribute,
    requires_replace,
    use_state_for_unknown,
)
from provider.framework.validators import string_length


class ThingResource(Resource):
    type_name = "sample_thing"
    import_id_attribute = "id"
    identity_schema = IdentitySchema({"id": IdentityAttribute(description="The thing's id.")}, version=1)
    schema = Schema(
        version=1,
        attributes={
            "id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
            "name": StringAttribute(required=True, validators=[string_length(min=1, max=8)]),
            "zone": StringAttribute(
                optional=True, computed=True, default="a", plan_modifiers=[requires_replace()]
            ),
            "size": Int64Attribute(optional=True),
        },
    )

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.started = threading.Event()

    def create(self, ctx: Context, plan: dict[str, Any]) -> dict[str, Any]:
        if plan["name"] == "slow":
            self.started.set()
            ctx.sleep(30)
        if plan["name"] == "boom":
            raise RuntimeError("backend exploded")
        state = {**plan, "id": f"t-{len(self.objects) + 1}"}
        self.objects[state["id"]] = state
        ctx.private["etag"] = "1"
        return state

    def read(self, ctx: Context, state: dict[str, Any]) -> dict[str, Any] | None:
        return self.objects.get(state["id"])

    def update(self, ctx: Context, plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        self.objects[plan["id"]] = plan
        return plan

    def delete(self, ctx: Context, state: dict[str, Any]) -> None:
        self.objects.pop(state["id"], None)

    def state_upgraders(self) -> dict[int, StateUpgrader]:
        v0 = Schema(
            attributes={"id": StringAttribute(computed=True), "title": StringAttribute(required=True)}
        )
        return {0: StateUpgrader(lambda ctx, old: {"id": old["id"], "name": old["title"]}, prior_schema=v0)}

    def identity_upgraders(self) -> dict[int, IdentityUpgrader]:
        return {0: IdentityUpgrader(lambda old: {"id": old["thing_id"]})}  # version 1 renamed thing_id

    def move_state(self, ctx: Context, source: MoveSource) -> dict[str, Any] | None:
        if source.type_name != "sample_old_thing":
            return None
        return {"id": source.state["id"], "name": source.state["label"], "zone": "a"}


class ThingLister(ListResource):
    """Lists the things of a ThingResource whose name starts with `name_prefix`."""

    type_name = "sample_thing"
    schema = Schema(
        attributes={"name_prefix": StringAttribute(optional=True, validators=[string_length(min=1)])}
    )

    def __init__(self, things: ThingResource) -> None:
        self.things = things

    def list(self, ctx: Context, config: dict[str, Any], *, include_state: bool) -> Iterator[ListResult]:
        prefix = config.get("name_prefix") or ""
        for thing in self.things.objects.values():
            if thing["name"] == "broken":
                ctx.error("Broken Thing", f"{thing['id']} cannot be listed.")
                return
            if thing["name"].startswith(prefix):
                yield ListResult({"id": thing["id"]}, thing["name"], thing if include_state else None)


class EchoDataSource(DataSource):
    type_name = "sample_echo"
    schema = Schema(
        attributes={"input": StringAttribute(required=True), "output": StringAttribute(computed=True)}
    )

    def read(self, ctx: Context, config: dict[str, Any]) -> dict[str, Any]:
        return {**config, "output": config["input"].upper()}


class TokenEphemeral(EphemeralResource):
    type_name = "sample_token"
    schema = Schema(
        attributes={
            "scope": StringAttribute(required=True),
            "token": StringAttribute(computed=True, sensitive=True),
        }
    )

    def __init__(self) -> None:
        self.closed: list[str] = []

    def open(self, ctx: Context, config: dict[str, Any]) -> EphemeralResult:
        ctx.private["lease"] = "L1"
        return EphemeralResult(
            {**config, "token": "secret-" + config["scope"]}, renew_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        )

    def close(self, ctx: Context) -> None:
        self.closed.append(ctx.private["lease"])


class AddFunction(Function):
    name = "add"
    parameters = (Parameter("a", NUMBER), Parameter("b", NUMBER))
    return_type = NUMBER
    summary = "Adds two numbers."

    def call(self, ctx: Context, *args: Any) -> Any:
        if args[1] == 0:
            raise FunctionError("b must not be zero", argument=1)
        return args[0] + args[1]


class PokeAction(Action):
    """Pokes a thing `times` times, one progress message each; `wait` seconds between pokes (stoppable)."""

    type_name = "sample_poke"
    schema = Schema(
        attributes={
            "thing_id": StringAttribute(required=True, validators=[string_length(min=1)]),
            "times": Int64Attribute(optional=True),
            "wait": Int64Attribute(optional=True),
        }
    )

    def __init__(self, things: ThingResource) -> None:
        self.things = things
        self.poked: list[str] = []

    def plan(self, ctx: Context, config: dict[str, Any]) -> None:
        thing_id = config["thing_id"]
        if isinstance(thing_id, str) and thing_id not in self.things.objects:
            ctx.error("Thing Not Found", f"No thing {thing_id}.")

    def invoke(self, ctx: Context, config: dict[str, Any]) -> Iterable[str]:
        times = config["times"] or 1
        for n in range(1, times + 1):
            if config["thing_id"] == "boom" and n == 2:
                raise RuntimeError("the poker broke")
            if config["thing_id"] == "tired" and n == 2:
                ctx.error("Too Tired", "Poke 2 refused.")
            self.poked.append(config["thing_id"])
            yield f"poke {n}/{times}"
            if config["wait"]:
                ctx.sleep(config["wait"])


class SampleProvider(Provider):
    type_name = "sample"
    schema = Schema(attributes={"endpoint": StringAttribute(optional=True)})

    def __init__(self) -> None:
        self.thing = ThingResource()
        self.token = TokenEphemeral()
        self.poke = PokeAction(self.thing)
        self.configured_with: Any = None

    def configure(self, ctx: Context, config: dict[str, Any]) -> Any:
        self.configured_with = config
        return {"endpoint": config["endpoint"]}

    def resources(self) -> list[Resource]:
        return [self.thing]

    def data_sources(self) -> list[DataSource]:
        return [EchoDataSource()]

    def ephemeral_resources(self) -> list[EphemeralResource]:
        return [self.token]

    def functions(self) -> list[Function]:
        return [AddFunction()]

    def list_resources(self) -> list[ListResource]:
        return [ThingLister(self.thing)]

    def actions(self) -> list[Action]:
        return [self.poke]
