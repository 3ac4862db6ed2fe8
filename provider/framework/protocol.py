"""Conversions between framework objects and tfplugin6 messages (schemas, values, diagnostics, paths)."""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import Iterable
from typing import Any

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import (
    AttributePath,
    CtyType,
    GetAttr,
    Index,
    decode_json,
    decode_msgpack,
    encode_msgpack,
    type_to_json,
)
from provider.framework.diagnostics import Diagnostic
from provider.framework.identity import IdentitySchema
from provider.framework.resource import Function, Parameter
from provider.framework.schema import Attribute, Block, NestedAttribute, Schema

MARKDOWN = pb.StringKind.MARKDOWN
_BLOCK_NESTING = {
    "single": pb.Schema.NestedBlock.SINGLE,
    "list": pb.Schema.NestedBlock.LIST,
    "set": pb.Schema.NestedBlock.SET,
}
_OBJECT_NESTING = {
    "single": pb.Schema.Object.SINGLE,
    "list": pb.Schema.Object.LIST,
    "set": pb.Schema.Object.SET,
    "map": pb.Schema.Object.MAP,
}
_SEVERITY = {"error": pb.Diagnostic.ERROR, "warning": pb.Diagnostic.WARNING}


# -- values ------------------------------------------------------------------------------------------


def decode_value(dv: pb.DynamicValue, t: CtyType) -> Any:
    """A DynamicValue as a plain-Python cty value; an empty one is null."""
    if dv.msgpack:
        return decode_msgpack(dv.msgpack, t)
    if dv.json:
        return decode_json(dv.json, t)
    return None


def encode_value(value: Any, t: CtyType) -> pb.DynamicValue:
    return pb.DynamicValue(msgpack=encode_msgpack(value, t))


# -- diagnostics -------------------------------------------------------------------------------------


def path_to_pb(path: AttributePath) -> pb.AttributePath:
    steps = []
    for step in path:
        if isinstance(step, GetAttr):
            steps.append(pb.AttributePath.Step(attribute_name=step.name))
        elif isinstance(step, Index) and isinstance(step.key, int):
            steps.append(pb.AttributePath.Step(element_key_int=step.key))
        else:
            steps.append(pb.AttributePath.Step(element_key_string=str(step.key)))
    return pb.AttributePath(steps=steps)


def diagnostics_to_pb(diags: Iterable[Diagnostic]) -> list[pb.Diagnostic]:
    out = []
    for d in diags:
        msg = pb.Diagnostic(severity=_SEVERITY[d.severity], summary=d.summary, detail=d.detail)
        if d.path:
            msg.attribute.CopyFrom(path_to_pb(d.path))
        out.append(msg)
    return out


def timestamp(moment: dt.datetime) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    ts = Timestamp()
    ts.FromDatetime(moment.astimezone(dt.UTC))
    return ts


# -- schemas -----------------------------------------------------------------------------------------


def _description(text: str, deprecation: str) -> str:
    return f"{text}\n\n**Deprecated:** {deprecation}".strip() if deprecation else text


def attribute_to_pb(name: str, attr: Attribute) -> pb.Schema.Attribute:
    msg = pb.Schema.Attribute(
        name=name,
        description=_description(attr.description, attr.deprecation_message),
        description_kind=MARKDOWN,
        required=attr.required,
        optional=attr.optional,
        computed=attr.computed,
        sensitive=attr.sensitive,
        deprecated=bool(attr.deprecation_message),
        write_only=attr.write_only,
    )
    if isinstance(attr, NestedAttribute):
        msg.nested_type.CopyFrom(
            pb.Schema.Object(
                attributes=[attribute_to_pb(n, a) for n, a in attr.attributes.items()],
                nesting=_OBJECT_NESTING[attr.nesting],
            )
        )
    else:
        msg.type = type_to_json(attr.cty_type)
    return msg


def block_to_pb(node: Schema | Block, version: int = 0) -> pb.Schema.Block:
    return pb.Schema.Block(
        version=version,
        attributes=[attribute_to_pb(n, a) for n, a in node.attributes.items()],
        block_types=[
            pb.Schema.NestedBlock(
                type_name=n,
                block=block_to_pb(b),
                nesting=_BLOCK_NESTING[b.nesting],
                min_items=b.min_items,
                max_items=b.max_items,
            )
            for n, b in node.blocks.items()
        ],
        description=_description(node.description, node.deprecation_message),
        description_kind=MARKDOWN,
        deprecated=bool(node.deprecation_message),
    )


# The message of each schema, built once per process: Terraform asks for the whole provider schema in
# the first launch of every command, and a warm daemon builds the messages before it forks the launches
# (`provider.resources.preload`). A schema is not changed once constructed; callers copy the message.
_SCHEMA_MESSAGES: weakref.WeakKeyDictionary[Schema, pb.Schema] = weakref.WeakKeyDictionary()


def schema_to_pb(schema: Schema) -> pb.Schema:
    msg = _SCHEMA_MESSAGES.get(schema)
    if msg is None:
        msg = pb.Schema(version=schema.version, block=block_to_pb(schema, schema.version))
        _SCHEMA_MESSAGES[schema] = msg
    return msg


def _parameter_to_pb(p: Parameter) -> pb.Function.Parameter:
    return pb.Function.Parameter(
        name=p.name,
        type=type_to_json(p.type),
        allow_null_value=p.allow_null,
        allow_unknown_values=p.allow_unknown,
        description=p.description,
        description_kind=MARKDOWN,
    )


def function_to_pb(fn: Function) -> pb.Function:
    msg = pb.Function(
        parameters=[_parameter_to_pb(p) for p in fn.parameters],
        summary=fn.summary,
        description=fn.description,
        description_kind=MARKDOWN,
        deprecation_message=fn.deprecation_message,
    )
    if fn.variadic is not None:
        msg.variadic_parameter.CopyFrom(_parameter_to_pb(fn.variadic))
    getattr(msg, "return").type = type_to_json(fn.return_type)
    return msg


def identity_schema_to_pb(schema: IdentitySchema) -> pb.ResourceIdentitySchema:
    return pb.ResourceIdentitySchema(
        version=schema.version,
        identity_attributes=[
            pb.ResourceIdentitySchema.IdentityAttribute(
                name=name,
                type=type_to_json(attr.type),
                required_for_import=attr.required_for_import,
                optional_for_import=not attr.required_for_import,
                description=attr.description,
            )
            for name, attr in schema.attributes.items()
        ],
    )
