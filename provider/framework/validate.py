"""Configuration validation against the schema: validators, whole-number checks, deprecation warnings.

Terraform itself checks types, required and unexpected attributes and block counts; this adds what only
the provider knows. Null and unknown values are never rejected.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from provider.cty import AttributePath, Index, Set, format_path, is_unknown
from provider.framework.diagnostics import Diagnostic, Diagnostics
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
            diags.error("Invalid Attribute Value", _not_int64(apath, attr.validators, value), apath)
            continue
        found = Diagnostics()
        for validator in attr.validators:
            validator.validate(value, apath, found)
        diags.extend(_at_set(found, apath, value) if isinstance(attr.cty_type, Set) else found)
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


def _not_int64(path: AttributePath, validators: Any, value: Any) -> str:
    """What a number that is no int64 breaks: the attribute's own range when it has one (`1-4096`), not
    the int64 bounds, which say nothing to the user."""
    ranges = [
        d.removeprefix("value must be ")
        for d in (getattr(v, "description", "") for v in validators)
        if d.startswith("value must be ")
    ]
    rule = ranges[0] if ranges else f"between {INT64_MIN} and {INT64_MAX}"
    return f"Attribute {format_path(path)} must be a whole number {rule}, got: {value}"


def _at_set(found: Diagnostics, set_path: AttributePath, value: Any) -> list[Diagnostic]:
    """Diagnostics about set elements moved to the set itself: the protocol cannot address a set element,
    and an index into the (sorted) set would name the wrong one. The detail names the element by value."""
    out = []
    for d in found:
        if d.path is None or len(d.path) <= len(set_path) or d.path[: len(set_path)] != set_path:
            out.append(d)
            continue
        step = d.path[len(set_path)]
        key = step.key if isinstance(step, Index) else None
        in_range = isinstance(key, int) and isinstance(value, list) and key < len(value)
        element = value[key] if in_range else None
        shown = json.dumps(element) if isinstance(element, str | int) else "element"
        detail = d.detail.replace(format_path(d.path), f"{format_path(set_path)} element {shown}")
        out.append(Diagnostic(d.severity, d.summary, detail, set_path))
    return out


def _is_int64(value: Any) -> bool:
    if isinstance(value, Decimal):
        if value != value.to_integral_value():
            return False
        value = int(value)
    return isinstance(value, int) and INT64_MIN <= value <= INT64_MAX
