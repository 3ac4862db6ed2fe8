"""Configuration validation against the schema: validators, whole-number checks, deprecation warnings.

Terraform itself checks types, required and unexpected attributes and block counts; this adds what only
the provider knows. Null and unknown values are never rejected.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provider.cty import AttributePath, format_path, is_unknown
from provider.framework.diagnostics import Diagnostics
from provider.framework.schema import Int64Attribute, NestedAttribute, Nesting
from provider.framework.walk import Node

ROOT = AttributePath()

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def validate_config(node: Node, config: Any, diags: Diagnostics, path: AttributePath = ROOT) -> None:
    if not isinstance(config, dict):
        return
    for name, attr in node.attributes.items():
        value = config.get(name)
        if value is None:
            continue
        apath = path.attr(name)
        if attr.deprecation_message:
            diags.warning("Attribute Deprecated", attr.deprecation_message, apath)
        if is_unknown(value):
            continue
        if isinstance(attr, Int64Attribute) and not _is_int64(value):
            diags.error(
                "Invalid Attribute Value",
                f"Attribute {format_path(apath)} must be a whole number between {INT64_MIN} and "
                f"{INT64_MAX}, got: {value}",
                apath,
            )
            continue
        for validator in attr.validators:
            validator.validate(value, apath, diags)
        if isinstance(attr, NestedAttribute):
            _validate_elements(attr, attr.nesting, value, apath, diags)
    for name, block in node.blocks.items():
        value = config.get(name)
        if value is None or is_unknown(value):
            continue
        bpath = path.attr(name)
        if block.deprecation_message and value != []:
            diags.warning("Block Deprecated", block.deprecation_message, bpath)
        for validator in block.validators:
            validator.validate(value, bpath, diags)
        _validate_elements(block, block.nesting, value, bpath, diags)


def _validate_elements(
    node: Node, nesting: Nesting, value: Any, path: AttributePath, diags: Diagnostics
) -> None:
    if nesting == "single":
        validate_config(node, value, diags, path)
    elif nesting == "list":
        for i, elem in enumerate(value):
            validate_config(node, elem, diags, path.element(i))
    elif nesting == "map":
        for key, elem in value.items():
            validate_config(node, elem, diags, path.element(key))
    else:  # set elements cannot be addressed: report at the set
        for elem in value:
            validate_config(node, elem, diags, path)


def _is_int64(value: Any) -> bool:
    if isinstance(value, Decimal):
        if value != value.to_integral_value():
            return False
        value = int(value)
    return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX
