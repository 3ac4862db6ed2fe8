"""Data source, ephemeral resource and function of the conformance provider."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from acceptance.conformance.data import ConformanceData
from provider.cty import STRING
from provider.framework import (
    Context,
    DataSource,
    EphemeralResource,
    EphemeralResult,
    Function,
    FunctionError,
    Int64Attribute,
    Parameter,
    Schema,
    State,
    StringAttribute,
)
from provider.framework.validators import int_between


class EchoDataSource(DataSource):
    type_name = "conformance_echo"
    schema = Schema(
        description="Echoes its input upper-cased, and how long the provider's configured token is.",
        attributes={
            "input": StringAttribute(required=True, description="Any string."),
            "output": StringAttribute(computed=True, description="`input` upper-cased."),
            "token_length": Int64Attribute(computed=True, description="Length of the provider `token`."),
        },
    )

    def read(self, ctx: Context, config: State) -> State:
        data: ConformanceData = ctx.provider_data
        return {**config, "output": config["input"].upper(), "token_length": len(data.token or "")}


class TokenEphemeral(EphemeralResource):
    """A credential that must never reach state; open/close are logged in the store (with the value,
    so tests can check it appears nowhere else)."""

    type_name = "conformance_token"
    schema = Schema(
        description="A random token that exists only while Terraform runs.",
        attributes={
            "length": Int64Attribute(
                required=True, description="Token length.", validators=[int_between(4, 64)]
            ),
            "value": StringAttribute(computed=True, sensitive=True, description="The token."),
        },
    )

    def open(self, ctx: Context, config: State) -> EphemeralResult:
        data: ConformanceData = ctx.provider_data
        value = os.urandom(32).hex()[: int(config["length"])]  # what secrets.token_hex does
        lease = data.store.next_id("lease")
        ctx.private.update(lease=lease, value=value)
        data.store.put("ephemeral_log", lease, f"opened:{value}", STRING)
        return EphemeralResult(
            {**config, "value": value}, renew_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        )

    def close(self, ctx: Context) -> None:
        data: ConformanceData = ctx.provider_data
        data.store.put("ephemeral_log", ctx.private["lease"], f"closed:{ctx.private['value']}", STRING)


class JoinFunction(Function):
    name = "join"
    summary = "Joins strings with a separator."
    description = '`provider::conformance::join("-", "a", "b")` is `"a-b"`.'
    parameters = (Parameter("separator", STRING, description="Put between the words; not empty."),)
    variadic = Parameter("words", STRING, description="Words to join.")
    return_type = STRING

    def call(self, ctx: Context, *args: Any) -> Any:
        separator, *words = args
        if separator == "":
            raise FunctionError("separator must not be empty", argument=0)
        return separator.join(words)
