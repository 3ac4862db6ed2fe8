"""Schema DSL in the style of terraform-plugin-framework: attributes, nested attributes and blocks.

Definitions are checked when built (a provider bug such as `required` + `computed` fails at import time,
not in front of a user). Every node caches its cty type.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from provider.cty import BOOL, DYNAMIC, NUMBER, STRING, CtyType, List, Map, Object, Set

if TYPE_CHECKING:
    from provider.framework.planmodifiers import PlanModifier
    from provider.framework.validators import Validator

Nesting = Literal["single", "list", "set", "map"]


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True, kw_only=True, eq=False)
class Attribute:
    """Common fields of every attribute. Use the concrete subclasses (StringAttribute, ...)."""

    required: bool = False
    optional: bool = False
    computed: bool = False
    sensitive: bool = False
    description: str = ""
    deprecation_message: str = ""
    validators: Sequence[Validator] = ()
    plan_modifiers: Sequence[PlanModifier] = ()
    # A static value planned when the configuration leaves the attribute null (needs computed=True).
    default: Any = NO_DEFAULT

    def __post_init__(self) -> None:
        if self.required and (self.optional or self.computed):
            raise ValueError("a required attribute cannot also be optional or computed")
        if not (self.required or self.optional or self.computed):
            raise ValueError("an attribute must be required, optional or computed")
        if self.has_default and not self.computed:
            raise ValueError(
                "an attribute with a default must be computed (set optional=True, computed=True)"
            )
        object.__setattr__(self, "validators", tuple(self.validators))
        object.__setattr__(self, "plan_modifiers", tuple(self.plan_modifiers))
        object.__setattr__(self, "_type", self._build_type())

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    def default_value(self) -> Any:
        return copy.deepcopy(self.default) if isinstance(self.default, list | dict) else self.default

    @property
    def cty_type(self) -> CtyType:
        return self._type  # type: ignore[attr-defined,no-any-return]

    def _build_type(self) -> CtyType:
        raise NotImplementedError

    @property
    def type_label(self) -> str:
        """Human-readable type for docs ("String", "List of String", ...)."""
        return type(self).__name__.removesuffix("Attribute")


@dataclass(frozen=True, kw_only=True, eq=False)
class StringAttribute(Attribute):
    def _build_type(self) -> CtyType:
        return STRING


@dataclass(frozen=True, kw_only=True, eq=False)
class BoolAttribute(Attribute):
    def _build_type(self) -> CtyType:
        return BOOL

    @property
    def type_label(self) -> str:
        return "Boolean"


@dataclass(frozen=True, kw_only=True, eq=False)
class NumberAttribute(Attribute):
    """Arbitrary-precision number (int or Decimal)."""

    def _build_type(self) -> CtyType:
        return NUMBER


@dataclass(frozen=True, kw_only=True, eq=False)
class Int64Attribute(Attribute):
    """Whole number; a fractional or out-of-range configuration value is rejected at validation."""

    def _build_type(self) -> CtyType:
        return NUMBER

    @property
    def type_label(self) -> str:
        return "Number"


@dataclass(frozen=True, kw_only=True, eq=False)
class Float64Attribute(Attribute):
    def _build_type(self) -> CtyType:
        return NUMBER

    @property
    def type_label(self) -> str:
        return "Number"


@dataclass(frozen=True, kw_only=True, eq=False)
class DynamicAttribute(Attribute):
    """Any type, chosen by the configuration; values are `provider.cty.Dynamic`."""

    def _build_type(self) -> CtyType:
        return DYNAMIC


@dataclass(frozen=True, kw_only=True, eq=False)
class ListAttribute(Attribute):
    element_type: CtyType

    def _build_type(self) -> CtyType:
        return List(self.element_type)

    @property
    def type_label(self) -> str:
        return f"List of {_label(self.element_type)}"


@dataclass(frozen=True, kw_only=True, eq=False)
class SetAttribute(Attribute):
    element_type: CtyType

    def _build_type(self) -> CtyType:
        return Set(self.element_type)

    @property
    def type_label(self) -> str:
        return f"Set of {_label(self.element_type)}"


@dataclass(frozen=True, kw_only=True, eq=False)
class MapAttribute(Attribute):
    element_type: CtyType

    def _build_type(self) -> CtyType:
        return Map(self.element_type)

    @property
    def type_label(self) -> str:
        return f"Map of {_label(self.element_type)}"


@dataclass(frozen=True, kw_only=True, eq=False)
class ObjectAttribute(Attribute):
    attribute_types: Mapping[str, CtyType]

    def _build_type(self) -> CtyType:
        return Object(dict(self.attribute_types))

    @property
    def type_label(self) -> str:
        return "Object"


@dataclass(frozen=True, kw_only=True, eq=False)
class NestedAttribute(Attribute):
    """Attribute whose value is an object (or a list/set/map of objects) described by `attributes`."""

    attributes: Mapping[str, Attribute]
    nesting: Nesting = "single"

    @property
    def blocks(self) -> Mapping[str, Block]:
        return {}

    def _build_type(self) -> CtyType:
        obj = Object({name: a.cty_type for name, a in self.attributes.items()})
        return _wrap(obj, self.nesting)

    @property
    def object_type(self) -> Object:
        return Object({name: a.cty_type for name, a in self.attributes.items()})

    @property
    def type_label(self) -> str:
        return {
            "single": "Attributes",
            "list": "Attributes List",
            "set": "Attributes Set",
            "map": "Attributes Map",
        }[self.nesting]


@dataclass(frozen=True, kw_only=True, eq=False)
class SingleNestedAttribute(NestedAttribute):
    nesting: Nesting = "single"


@dataclass(frozen=True, kw_only=True, eq=False)
class ListNestedAttribute(NestedAttribute):
    nesting: Nesting = "list"


@dataclass(frozen=True, kw_only=True, eq=False)
class SetNestedAttribute(NestedAttribute):
    nesting: Nesting = "set"


@dataclass(frozen=True, kw_only=True, eq=False)
class MapNestedAttribute(NestedAttribute):
    nesting: Nesting = "map"


@dataclass(frozen=True, kw_only=True, eq=False)
class Block:
    """A nested block (`name { ... }` in HCL). Blocks are never computed; absent list/set blocks are []."""

    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    blocks: Mapping[str, Block] = field(default_factory=dict)
    nesting: Nesting = "list"
    description: str = ""
    deprecation_message: str = ""
    min_items: int = 0
    max_items: int = 0
    validators: Sequence[Validator] = ()
    plan_modifiers: Sequence[PlanModifier] = ()

    def __post_init__(self) -> None:
        if self.nesting == "map":
            raise ValueError("map blocks are not supported; use a MapNestedAttribute")
        object.__setattr__(self, "validators", tuple(self.validators))
        object.__setattr__(self, "plan_modifiers", tuple(self.plan_modifiers))
        obj = Object(
            {
                **{n: a.cty_type for n, a in self.attributes.items()},
                **{n: b.cty_type for n, b in self.blocks.items()},
            }
        )
        object.__setattr__(self, "_object_type", obj)
        object.__setattr__(self, "_type", _wrap(obj, self.nesting))

    @property
    def cty_type(self) -> CtyType:
        return self._type  # type: ignore[attr-defined,no-any-return]

    @property
    def object_type(self) -> Object:
        return self._object_type  # type: ignore[attr-defined,no-any-return]

    # Blocks share the attribute interface used by the plan walker.
    computed = False
    required = False
    optional = True
    sensitive = False
    has_default = False

    @property
    def type_label(self) -> str:
        return {"single": "Block", "list": "Block List", "set": "Block Set"}[self.nesting]


@dataclass(frozen=True, kw_only=True, eq=False)
class ListNestedBlock(Block):
    nesting: Nesting = "list"


@dataclass(frozen=True, kw_only=True, eq=False)
class SetNestedBlock(Block):
    nesting: Nesting = "set"


@dataclass(frozen=True, kw_only=True, eq=False)
class SingleNestedBlock(Block):
    nesting: Nesting = "single"


@dataclass(frozen=True, kw_only=True, eq=False)
class Schema:
    """The schema of a provider configuration, resource, data source or ephemeral resource."""

    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    blocks: Mapping[str, Block] = field(default_factory=dict)
    description: str = ""
    deprecation_message: str = ""
    version: int = 0

    def __post_init__(self) -> None:
        clash = set(self.attributes) & set(self.blocks)
        if clash:
            raise ValueError(f"names used both as attribute and block: {sorted(clash)}")
        obj = Object(
            {
                **{n: a.cty_type for n, a in self.attributes.items()},
                **{n: b.cty_type for n, b in self.blocks.items()},
            }
        )
        object.__setattr__(self, "_type", obj)

    @property
    def cty_type(self) -> Object:
        return self._type  # type: ignore[attr-defined,no-any-return]


def _wrap(obj: Object, nesting: Nesting) -> CtyType:
    if nesting == "single":
        return obj
    if nesting == "list":
        return List(obj)
    if nesting == "set":
        return Set(obj)
    return Map(obj)


def _label(t: CtyType) -> str:
    names = {STRING: "String", NUMBER: "Number", BOOL: "Boolean", DYNAMIC: "Dynamic"}
    if t in names:
        return names[t]
    if isinstance(t, List):
        return f"List of {_label(t.element)}"
    if isinstance(t, Set):
        return f"Set of {_label(t.element)}"
    if isinstance(t, Map):
        return f"Map of {_label(t.element)}"
    return "Object"


def empty_value(node: Schema | Block | NestedAttribute) -> dict[str, Any]:
    """An object of `node` with every attribute null and every list/set block empty."""
    out: dict[str, Any] = dict.fromkeys(node.attributes)
    for name, block in node.blocks.items():
        out[name] = None if block.nesting == "single" else []
    return out
