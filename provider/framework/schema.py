"""Schema DSL in the style of terraform-plugin-framework: attributes, nested attributes and blocks.

Definitions are checked when built (a provider bug such as `required` + `computed` fails at import time,
not in front of a user). Every node computes its cty type once. Plain classes (not dataclasses): schema
modules are imported on every provider launch, and dataclass generation costs milliseconds.
Treat schema objects as immutable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from provider.cty import BOOL, DYNAMIC, NUMBER, STRING, CtyType, List, Map, Object, Set

if TYPE_CHECKING:
    from provider.framework.planmodifiers import PlanModifier
    from provider.framework.semantic import SemanticType
    from provider.framework.validators import Validator

Nesting = Literal["single", "list", "set", "map"]


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


class Attribute:
    """Common fields of every attribute. Use the concrete subclasses (StringAttribute, ...)."""

    label = ""

    def __init__(
        self,
        *,
        required: bool = False,
        optional: bool = False,
        computed: bool = False,
        sensitive: bool = False,
        description: str = "",
        deprecation_message: str = "",
        validators: Sequence[Validator] = (),
        plan_modifiers: Sequence[PlanModifier] = (),
        default: Any = NO_DEFAULT,
        semantic: SemanticType | None = None,
        write_only: bool = False,
    ) -> None:
        if required and (optional or computed):
            raise ValueError("a required attribute cannot also be optional or computed")
        if not (required or optional or computed):
            raise ValueError("an attribute must be required, optional or computed")
        if default is not NO_DEFAULT and not computed:
            raise ValueError(
                "an attribute with a default must be computed (set optional=True, computed=True)"
            )
        if write_only and computed:
            raise ValueError("a write-only attribute cannot be computed (Terraform never stores its value)")
        self.required = required
        self.optional = optional
        self.computed = computed
        self.sensitive = sensitive
        # Write-only (Terraform 1.11+): set in configuration, never in plan or state; the framework reads
        # it from the configuration at apply (`provider.framework.writeonly`).
        self.write_only = write_only
        self.description = description
        self.deprecation_message = deprecation_message
        self.validators: tuple[Validator, ...] = tuple(validators)
        self.plan_modifiers: tuple[PlanModifier, ...] = tuple(plan_modifiers)
        # A custom type's semantic equality (`provider.framework.semantic`): a value meaning the same as
        # the prior one in another spelling keeps the prior one, in plans and in results.
        self.semantic = semantic
        if semantic is not None:
            from provider.framework.semantic import KeepPriorWhenSemanticallyEqual

            self.plan_modifiers = (KeepPriorWhenSemanticallyEqual(semantic), *self.plan_modifiers)
        # A static value planned when the configuration leaves the attribute null.
        self.default = default
        self.has_default = default is not NO_DEFAULT
        self.cty_type: CtyType = self._build_type()

    def default_value(self) -> Any:
        return copy.deepcopy(self.default) if isinstance(self.default, list | dict) else self.default

    def _build_type(self) -> CtyType:
        raise NotImplementedError

    @property
    def type_label(self) -> str:
        """Type as the Registry docs name it ("String", "List of String", ...)."""
        return self.label

    def __repr__(self) -> str:
        names = ("required", "optional", "computed", "sensitive", "write_only")
        flags = [f for f in names if getattr(self, f)]
        return f"{type(self).__name__}({', '.join(flags)})"


class StringAttribute(Attribute):
    label = "String"

    def _build_type(self) -> CtyType:
        return STRING


class BoolAttribute(Attribute):
    label = "Boolean"

    def _build_type(self) -> CtyType:
        return BOOL


class NumberAttribute(Attribute):
    """Arbitrary-precision number (int or Decimal)."""

    label = "Number"

    def _build_type(self) -> CtyType:
        return NUMBER


class Int64Attribute(Attribute):
    """Whole number; a fractional or out-of-range configuration value is rejected at validation."""

    label = "Number"

    def _build_type(self) -> CtyType:
        return NUMBER


class Float64Attribute(Attribute):
    label = "Number"

    def _build_type(self) -> CtyType:
        return NUMBER


class DynamicAttribute(Attribute):
    """Any type, chosen by the configuration; values are `provider.cty.Dynamic`."""

    label = "Dynamic"

    def _build_type(self) -> CtyType:
        return DYNAMIC


class _CollectionAttribute(Attribute):
    collection: type[List] | type[Set] | type[Map] = List
    kind = "List"

    def __init__(self, *, element_type: CtyType, **kwargs: Any) -> None:
        self.element_type = element_type
        super().__init__(**kwargs)

    def _build_type(self) -> CtyType:
        return self.collection(self.element_type)

    @property
    def type_label(self) -> str:
        return f"{self.kind} of {_label(self.element_type)}"


class ListAttribute(_CollectionAttribute):
    collection = List
    kind = "List"


class SetAttribute(_CollectionAttribute):
    collection = Set
    kind = "Set"


class MapAttribute(_CollectionAttribute):
    collection = Map
    kind = "Map"


class ObjectAttribute(Attribute):
    label = "Object"

    def __init__(self, *, attribute_types: Mapping[str, CtyType], **kwargs: Any) -> None:
        self.attribute_types = dict(attribute_types)
        super().__init__(**kwargs)

    def _build_type(self) -> CtyType:
        return Object(self.attribute_types)


class NestedAttribute(Attribute):
    """Attribute whose value is an object (or a list/set/map of objects) described by `attributes`."""

    nesting: Nesting = "single"
    blocks: Mapping[str, Block] = {}  # nested attributes have no blocks (shared walker interface)

    def __init__(self, *, attributes: Mapping[str, Attribute], **kwargs: Any) -> None:
        _no_nested_write_only(attributes)
        self.attributes = dict(attributes)
        self.object_type = Object({name: a.cty_type for name, a in self.attributes.items()})
        super().__init__(**kwargs)

    def _build_type(self) -> CtyType:
        return _wrap(self.object_type, self.nesting)

    @property
    def type_label(self) -> str:
        return {
            "single": "Attributes",
            "list": "Attributes List",
            "set": "Attributes Set",
            "map": "Attributes Map",
        }[self.nesting]


class SingleNestedAttribute(NestedAttribute):
    nesting: Nesting = "single"


class ListNestedAttribute(NestedAttribute):
    nesting: Nesting = "list"


class SetNestedAttribute(NestedAttribute):
    nesting: Nesting = "set"


class MapNestedAttribute(NestedAttribute):
    nesting: Nesting = "map"


class Block:
    """A nested block (`name { ... }` in HCL). Blocks are never computed; absent list/set blocks are []."""

    nesting: Nesting = "list"
    # Blocks share the attribute interface used by the plan walker.
    computed = False
    required = False
    optional = True
    sensitive = False
    write_only = False
    has_default = False

    def __init__(
        self,
        *,
        attributes: Mapping[str, Attribute] | None = None,
        blocks: Mapping[str, Block] | None = None,
        description: str = "",
        deprecation_message: str = "",
        min_items: int = 0,
        max_items: int = 0,
        validators: Sequence[Validator] = (),
        plan_modifiers: Sequence[PlanModifier] = (),
    ) -> None:
        _no_nested_write_only(attributes or {})
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.blocks: dict[str, Block] = dict(blocks or {})
        self.description = description
        self.deprecation_message = deprecation_message
        self.min_items = min_items
        self.max_items = max_items
        self.validators: tuple[Validator, ...] = tuple(validators)
        self.plan_modifiers: tuple[PlanModifier, ...] = tuple(plan_modifiers)
        self.object_type = _object_type(self.attributes, self.blocks)
        self.cty_type: CtyType = _wrap(self.object_type, self.nesting)

    @property
    def type_label(self) -> str:
        return {"single": "Block", "list": "Block List", "set": "Block Set"}[self.nesting]


class ListNestedBlock(Block):
    nesting: Nesting = "list"


class SetNestedBlock(Block):
    nesting: Nesting = "set"


class SingleNestedBlock(Block):
    nesting: Nesting = "single"


class Schema:
    """The schema of a provider configuration, resource, data source or ephemeral resource."""

    def __init__(
        self,
        *,
        attributes: Mapping[str, Attribute] | None = None,
        blocks: Mapping[str, Block] | None = None,
        description: str = "",
        deprecation_message: str = "",
        version: int = 0,
    ) -> None:
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.blocks: dict[str, Block] = dict(blocks or {})
        clash = set(self.attributes) & set(self.blocks)
        if clash:
            raise ValueError(f"names used both as attribute and block: {sorted(clash)}")
        self.description = description
        self.deprecation_message = deprecation_message
        self.version = version
        self.cty_type: Object = _object_type(self.attributes, self.blocks)
        self.write_only: tuple[str, ...] = tuple(n for n, a in self.attributes.items() if a.write_only)


def _no_nested_write_only(attributes: Mapping[str, Attribute]) -> None:
    # The framework keeps write-only values out of plan and state for top-level attributes only.
    nested = sorted(name for name, attr in attributes.items() if attr.write_only)
    if nested:
        raise ValueError(f"write-only attributes are supported at the top level of a schema only: {nested}")


def _object_type(attributes: Mapping[str, Attribute], blocks: Mapping[str, Block]) -> Object:
    return Object(
        {**{n: a.cty_type for n, a in attributes.items()}, **{n: b.cty_type for n, b in blocks.items()}}
    )


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
