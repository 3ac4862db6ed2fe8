"""The API's input rules as plan-time checks, derived from the OpenAPI contract (proto/openapi.json).

`api_rules.json` beside this module is generated from the contract (`scripts/generate.sh rules`, a test
keeps it fresh): for each request schema the provider mirrors, the JSON Schema constraints of every field
(dotted paths, `$ref`s and nullable `anyOf`s resolved) and the `x-gpucloud-rules` the schema cannot say
(see backend `domain/input_rules.py` for their meaning). Resources take their attribute validators from
`field_validators` and check the rules between fields with `check_field_rules`; none of them is written
here a second time, so the plan and the API cannot disagree.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import struct
import sys
from collections.abc import Mapping
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from provider.cty import AttributePath, is_unknown
from provider.framework import Context, root
from provider.framework.diagnostics import Diagnostics
from provider.framework.validators import (
    Validator,
    decimal_digits,
    each_element,
    each_key,
    first_failure,
    int_between,
    number_between,
    number_greater_than,
    size_between,
    string_length,
    string_matches,
    string_one_of,
)

TABLE = Path(__file__).with_name("api_rules.json")
# The request schemas whose rules resources check at plan time.
SCHEMAS = (
    "ClusterCreate", "NodeActionIn", "SshKeyCreate", "VolumeCreate", "BudgetCreate", "SecurityGroupCreate",
    "ReservationCreate", "ReservedIpCreate", "HostPoolCreate",
)
FIELD_CHECKS = ("pattern", "forbidden_pattern", "ssh_key_type", "ssh_key_data", "ssh_rsa_bits")
LIST_CHECKS = ("security_rules",)
BETWEEN_FIELDS_CHECKS = ("not_allowed_when", "required_when")


# -- generation: contract -> table -------------------------------------------------------------------


def extract(openapi: Mapping[str, Any]) -> dict[str, Any]:
    """The table of `SCHEMAS`: {schema: {"fields": {dotted: constraints}, "rules": [...]}}."""
    components = openapi["components"]["schemas"]
    table: dict[str, Any] = {}
    for name in SCHEMAS:
        fields: dict[str, Any] = {}
        _flatten_into(fields, "", components[name], components)
        table[name] = {"fields": fields, "rules": components[name].get("x-gpucloud-rules", [])}
    return table


def _resolve(schema: Mapping[str, Any], components: Mapping[str, Any]) -> dict[str, Any]:
    """One schema without `$ref` and without the null branch of a nullable `anyOf` (branches merged)."""
    if "$ref" in schema:
        return _resolve(components[schema["$ref"].rsplit("/", 1)[1]], components)
    out = {k: v for k, v in schema.items() if k not in ("anyOf", "title", "description")}
    for branch in schema.get("anyOf", []):
        if branch.get("type") != "null":
            for key, value in _resolve(branch, components).items():
                out.setdefault(key, value)
    if "items" in out:
        out["items"] = _resolve(out["items"], components)
    return out


def _flatten_into(fields: dict[str, Any], prefix: str, schema: Mapping[str, Any],
                  components: Mapping[str, Any]) -> None:
    for name, prop in schema.get("properties", {}).items():
        resolved = _resolve(prop, components)
        if "properties" in resolved:
            _flatten_into(fields, f"{prefix}{name}.", resolved, components)
            continue
        items = resolved.get("items", {})
        if "properties" in items:  # a list of objects: the list's own constraints, then `name[].field`
            fields[prefix + name] = {k: v for k, v in resolved.items() if k != "items"}
            _flatten_into(fields, f"{prefix}{name}[].", items, components)
        else:
            fields[prefix + name] = resolved


# -- the table at run time ---------------------------------------------------------------------------


@cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


def constraints(schema: str, field: str) -> dict[str, Any]:
    found: dict[str, Any] = table()[schema]["fields"][field]
    return found


def rules(schema: str, *, checks: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r for r in table()[schema]["rules"] if r["check"] in checks]


def _sentence(text: str) -> str:
    """A message as a sentence; one starting with an attribute name (`public_key ...`) keeps its case."""
    first = text.split(" ", 1)[0]
    if not any(mark in first for mark in "_.["):
        text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


# -- single-field validators -------------------------------------------------------------------------


def field_validators(schema: str, field: str, *, text: Mapping[str, str] | None = None) -> list[Validator]:
    """The validators of one API field: its rules first (they never echo the value), then its JSON Schema
    constraints; the first that fails stops the others. `text` words a pattern for people, by the
    pattern's location ("pattern", "items", "keys")."""
    found: list[Validator] = [
        _RuleValidator(r) for r in rules(schema, checks=FIELD_CHECKS) if r["field"] == field
    ]
    found += [_RulesListValidator(r) for r in rules(schema, checks=LIST_CHECKS) if r["field"] == field]
    found += schema_validators(constraints(schema, field), text or {})
    return [first_failure(*found)] if len(found) > 1 else found


RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})"


def schema_validators(
    c: Mapping[str, Any], text: Mapping[str, str], where: str = "pattern"
) -> list[Validator]:
    """Framework validators for one JSON Schema (the keywords pydantic writes)."""
    out: list[Validator] = []
    kind = c.get("type")
    if "enum" in c:
        out.append(string_one_of(*c["enum"]))
    if "minLength" in c or "maxLength" in c:
        out.append(string_length(min=c.get("minLength"), max=c.get("maxLength")))
    if "pattern" in c:
        out.append(string_matches(c["pattern"], text.get(where, "")))
    if c.get("format") == "date-time":
        out.append(string_matches(RFC3339, "must be an RFC 3339 date-time with a time zone, such as "
                                           "2026-12-01T18:00:00Z"))
    if kind == "integer" and ("minimum" in c or "maximum" in c):
        out.append(int_between(_whole(c.get("minimum")), _whole(c.get("maximum"))))
    if kind == "number":
        if "exclusiveMinimum" in c:
            out.append(number_greater_than(_whole(c["exclusiveMinimum"])))
        if "minimum" in c or "maximum" in c:
            out.append(number_between(_whole(c.get("minimum")), _whole(c.get("maximum"))))
        if "x-decimal-places" in c or "x-max-digits" in c:
            digits, places = c.get("x-max-digits"), c.get("x-decimal-places")
            out.append(decimal_digits(max_digits=digits, decimal_places=places))
    if "minItems" in c or "maxItems" in c:
        out.append(size_between(c.get("minItems"), c.get("maxItems")))
    if "minProperties" in c or "maxProperties" in c:
        out.append(size_between(c.get("minProperties"), c.get("maxProperties")))
    if "items" in c:
        out.append(each_element(*schema_validators(c["items"], text, "items")))
    keys = schema_validators(c["propertyNames"], text, "keys") if "propertyNames" in c else []
    for pattern, values in c.get("patternProperties", {}).items():
        if (c.get("propertyNames") or {}).get("pattern") != pattern:  # a key is checked once
            keys.append(string_matches(pattern, text.get("keys", "")))
        out.append(each_element(*schema_validators(values, text, "values")))
    if keys:
        out.insert(0, each_key(*keys))
    return out


def _whole(value: Any) -> Any:
    """1.0 -> 1 (pydantic writes integer bounds as floats); None stays None."""
    if value is None:
        return None
    exact = Decimal(str(value))
    return int(exact) if exact == exact.to_integral_value() else exact


class _RuleValidator:
    """One single-field rule of the contract. Its diagnostic never repeats the value (it may be a secret)."""

    def __init__(self, rule: Mapping[str, Any]) -> None:
        self.rule = rule
        self.description = rule["message"]

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if isinstance(value, str) and not is_unknown(value) and field_rule_broken(self.rule, value):
            diags.error(self.rule["title"], _sentence(self.rule["message"]), path)


class _RulesListValidator:
    """A `security_rules` rule of the contract: each firewall rule of the list, reported at the element's
    attribute at fault (ports against the protocol, CIDR blocks)."""

    def __init__(self, rule: Mapping[str, Any]) -> None:
        self.rule = rule
        self.description = rule["message"]

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if not isinstance(value, list):
            return
        for index, element in enumerate(value):
            if isinstance(element, Mapping):
                for attribute, at, problem in security_rule_problems(self.rule, element):
                    where = path.element(index).attr(attribute)
                    where = where if at is None else where.element(at)
                    # Terraform points at the whole list: the message says which rule.
                    diags.error(self.rule["title"], _sentence(f"{path.element(index)}: {problem}"), where)


def security_rule_problems(
    rule: Mapping[str, Any], element: Mapping[str, Any]
) -> list[tuple[str, int | None, str]]:
    """(attribute, list index or None, problem) of one firewall rule; unknown values are not judged."""
    protocol, low, high = element.get("protocol"), element.get("from_port"), element.get("to_port")
    out: list[tuple[str, int | None, str]] = []
    if not any(is_unknown(v) for v in (protocol, low, high)) and isinstance(protocol, str):
        if protocol in rule["portless_protocols"]:
            out += [(name, None, f"{name} is not allowed with protocol {protocol} (it matches every packet "
                                 "of the protocol): remove it")
                    for name, port in (("from_port", low), ("to_port", high)) if port is not None]
        elif low is None:
            needs = f"protocol {protocol} needs from_port (1-65535; to_port for a range)"
            out.append(("from_port", None, needs))
        elif high is not None and high < low:
            backwards = f"to_port {high} is below from_port {low}; a range runs from low to high"
            out.append(("to_port", None, backwards))
    blocks = element.get("cidr_blocks")
    for at, cidr in enumerate(blocks if isinstance(blocks, list) else []):
        problem = None if is_unknown(cidr) or not isinstance(cidr, str) else cidr_problem(cidr)
        if problem is not None:
            out.append(("cidr_blocks", at, problem))
    return out


def cidr_problem(text: str) -> str | None:
    """Why `text` is no network in CIDR notation (a host address with a prefix, say), or None."""
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as error:
        if "host bits set" in str(error):
            network = ipaddress.ip_network(text, strict=False)
            return f"{text!r} has host bits set; write the network, {network}"
        return f"{text!r} is not a CIDR block such as 10.0.0.0/8 or 2001:db8::/32"
    return None


def field_rule_broken(rule: Mapping[str, Any], value: str) -> bool:
    check = rule["check"]
    if check == "pattern":
        return re.fullmatch(rule["pattern"], value) is None
    if check == "forbidden_pattern":
        return re.search(rule["pattern"], value) is not None
    words = value.split()
    if check == "ssh_key_type":
        return bool(words) and words[0] not in rule["allowed"]
    blob = _key_blob(words)
    if check == "ssh_key_data":
        return blob is None or _first_text(blob) != words[0] or _has_control_chars(value.strip())
    if check == "ssh_rsa_bits":
        bits = _rsa_bits(blob) if blob is not None and words[0] == "ssh-rsa" else None
        return bits is not None and bits < int(rule["min_bits"])
    raise ValueError(f"unknown rule check {check!r}")


_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # C0 controls but tab, and DEL


def _has_control_chars(line: str) -> bool:
    return _CONTROL_CHARS.search(line) is not None


def _key_blob(words: list[str]) -> bytes | None:
    if len(words) < 2:
        return None
    try:
        return base64.b64decode(words[1].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeError, ValueError):
        return None


def _text_at(blob: bytes, offset: int) -> tuple[bytes | None, int]:
    """One SSH wire-format string (uint32 length, bytes) at `offset`, and the offset after it."""
    if len(blob) < offset + 4:
        return None, offset
    (length,) = struct.unpack(">I", blob[offset : offset + 4])
    end = offset + 4 + length
    return (blob[offset + 4 : end], end) if end <= len(blob) else (None, offset)


def _rsa_bits(blob: bytes) -> int | None:
    """The modulus size of an ssh-rsa key blob (type, e, n), as ssh-keygen counts it."""
    _type, offset = _text_at(blob, 0)
    _exponent, offset = _text_at(blob, offset)
    modulus, _ = _text_at(blob, offset)
    return None if modulus is None else int.from_bytes(modulus, "big").bit_length()


def _first_text(blob: bytes) -> str | None:
    """The key type a blob embeds (its first string)."""
    found, _ = _text_at(blob, 0)
    try:
        return None if found is None else found.decode("ascii")
    except UnicodeDecodeError:
        return None


# -- rules between fields ----------------------------------------------------------------------------


def check_field_rules(
    ctx: Context, schema: str, config: Mapping[str, Any], renames: Mapping[str, str] | None = None
) -> None:
    """The contract's rules between fields, against the configuration (attribute names; `renames` maps
    API names of top-level fields to attribute names). A rule needing an unknown value is skipped."""
    blamed: set[str] = set()
    for rule in rules(schema, checks=BETWEEN_FIELDS_CHECKS):
        if rule["field"] in blamed:
            continue
        value, known = _value_at(config, rule["field"], renames)
        when = rule["when"]
        condition, condition_known = _value_at(config, when["field"], renames)
        if not (known and condition_known):
            continue
        if condition is None:
            condition = when.get("default")
        if not _holds(when["op"], condition, when["value"]):
            continue
        if rule["check"] == "required_when":
            broken = value is None
        else:
            broken = value is not None and ("value" not in rule or value == rule["value"])
        if broken:
            blamed.add(rule["field"])
            ctx.error(rule["title"], _sentence(rule["message"]), attribute_path(rule["field"], renames))


def _holds(op: str, value: Any, wanted: Any) -> bool:
    if op == "eq":
        return bool(value == wanted)
    if op == "ne":
        return bool(value != wanted)
    if op == "gt":
        return isinstance(value, int | Decimal) and not isinstance(value, bool) and value > wanted
    raise ValueError(f"unknown condition {op!r}")


def attribute_path(dotted: str, renames: Mapping[str, str] | None = None) -> AttributePath:
    first, *rest = dotted.split(".")
    out = root((renames or {}).get(first, first))
    for step in rest:
        out = out.attr(step)
    return out


def _value_at(config: Mapping[str, Any], dotted: str, renames: Mapping[str, str] | None) -> tuple[Any, bool]:
    """The configured value at an API path, and whether it is known."""
    first, *rest = dotted.split(".")
    value: Any = config.get((renames or {}).get(first, first))
    for step in rest:
        if is_unknown(value):
            return None, False
        value = value.get(step) if isinstance(value, Mapping) else None
    return value, not is_unknown(value)


if __name__ == "__main__":  # scripts/generate.sh rules CONTRACT [OUT]
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "proto/openapi.json")
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else TABLE
    out.write_text(json.dumps(extract(json.loads(source.read_text())), indent=1, sort_keys=True) + "\n")
