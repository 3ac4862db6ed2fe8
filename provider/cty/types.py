"""cty types and their JSON encoding (the form Terraform uses in schemas and dynamic values).

Types are immutable and hashable; the codecs compile one encoder/decoder per type and cache it by type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

from provider.cty.errors import TypeJsonError


class CtyType:
    """Base of every cty type. Instances are immutable, hashable and compare structurally."""

    __slots__ = ("_hash",)
    _hash: int

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("cty types are immutable")

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<cty {self.friendly_name()}>"


class PrimitiveType(CtyType):
    """string, number or bool."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_hash", hash(("primitive", name)))

    def __eq__(self, other: object) -> bool:
        return other is self or (other.__class__ is PrimitiveType and other.name == self.name)

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrimitiveType, (self.name,))


class DynamicPseudoType(CtyType):
    """The `dynamic` pseudo-type: the real type travels with each value."""

    __slots__ = ()

    def __init__(self) -> None:
        object.__setattr__(self, "_hash", hash("dynamic"))

    def __eq__(self, other: object) -> bool:
        return other.__class__ is DynamicPseudoType

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        return "dynamic"


STRING: Final = PrimitiveType("string")
NUMBER: Final = PrimitiveType("number")
BOOL: Final = PrimitiveType("bool")
DYNAMIC: Final = DynamicPseudoType()
_PRIMITIVES: Final[dict[str, CtyType]] = {
    "string": STRING,
    "number": NUMBER,
    "bool": BOOL,
    "dynamic": DYNAMIC,
}


class _CollectionType(CtyType):
    __slots__ = ("element",)
    element: CtyType
    kind: str = ""

    def __init__(self, element: CtyType) -> None:
        if not isinstance(element, CtyType):
            raise TypeError(f"{self.kind} element type must be a CtyType, got {element!r}")
        object.__setattr__(self, "element", element)
        object.__setattr__(self, "_hash", hash((self.kind, element)))

    def __eq__(self, other: object) -> bool:
        return other is self or (other.__class__ is self.__class__ and other.element == self.element)

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        return f"{self.kind} of {self.element.friendly_name()}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.element,))


class List(_CollectionType):
    __slots__ = ()
    kind = "list"


class Set(_CollectionType):
    __slots__ = ()
    kind = "set"


class Map(_CollectionType):
    __slots__ = ()
    kind = "map"


class Tuple(CtyType):
    __slots__ = ("elements",)
    elements: tuple[CtyType, ...]

    def __init__(self, elements: Iterable[CtyType]) -> None:
        elements = tuple(elements)
        for element in elements:
            if not isinstance(element, CtyType):
                raise TypeError(f"tuple element type must be a CtyType, got {element!r}")
        object.__setattr__(self, "elements", elements)
        object.__setattr__(self, "_hash", hash(("tuple", elements)))

    def __eq__(self, other: object) -> bool:
        return other is self or (other.__class__ is Tuple and other.elements == self.elements)

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        return "tuple"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Tuple, (self.elements,))


class Object(CtyType):
    """An object type. `attributes` is kept sorted by name (the order go-cty writes them in)."""

    __slots__ = ("attributes", "optional")
    attributes: Mapping[str, CtyType]
    optional: frozenset[str]

    def __init__(self, attributes: Mapping[str, CtyType], optional: Iterable[str] = frozenset()) -> None:
        attrs = {name: attributes[name] for name in sorted(attributes)}
        for name, attr_type in attrs.items():
            if not isinstance(name, str):
                raise TypeError(f"object attribute names must be strings, got {name!r}")
            if not isinstance(attr_type, CtyType):
                raise TypeError(f"type of attribute {name!r} must be a CtyType, got {attr_type!r}")
        optional = frozenset(optional)
        unknown = optional - attrs.keys()
        if unknown:
            raise ValueError(f"optional attributes {sorted(unknown)} are not attributes of the object")
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "optional", optional)
        object.__setattr__(self, "_hash", hash(("object", tuple(attrs.items()), optional)))

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if other.__class__ is not Object:
            return False
        return bool(
            self._hash == other._hash
            and self.attributes == other.attributes
            and self.optional == other.optional
        )

    def __hash__(self) -> int:
        return self._hash

    def friendly_name(self) -> str:
        return "object"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Object, (dict(self.attributes), self.optional))

    def __repr__(self) -> str:
        attrs = ", ".join(f"{name}: {t!r}" for name, t in self.attributes.items())
        optional = f", optional={sorted(self.optional)}" if self.optional else ""
        return f"<cty object {{{attrs}}}{optional}>"


# ---- type JSON ---------------------------------------------------------------------------------------


def type_to_obj(t: CtyType) -> Any:
    """The JSON-able form of a type: `"string"`, `["list", "string"]`, `["object", {...}, [optional]]`."""
    if t.__class__ is PrimitiveType:
        return t.name
    if t.__class__ is DynamicPseudoType:
        return "dynamic"
    if isinstance(t, _CollectionType):
        return [t.kind, type_to_obj(t.element)]
    if isinstance(t, Tuple):
        return ["tuple", [type_to_obj(e) for e in t.elements]]
    if isinstance(t, Object):
        attrs = {name: type_to_obj(a) for name, a in t.attributes.items()}
        if t.optional:
            return ["object", attrs, sorted(t.optional)]
        return ["object", attrs]
    raise TypeError(f"not a cty type: {t!r}")


_TYPE_JSON_CACHE: dict[CtyType, bytes] = {}


def type_to_json(t: CtyType) -> bytes:
    """Compact cty type JSON bytes, as a tfplugin6 Schema.Attribute.type or a dynamic value's type."""
    cached = _TYPE_JSON_CACHE.get(t)
    if cached is None:
        cached = json.dumps(type_to_obj(t), separators=(",", ":"), ensure_ascii=False).encode()
        if len(_TYPE_JSON_CACHE) < 4096:
            _TYPE_JSON_CACHE[t] = cached
    return cached


def type_from_json(data: bytes | str) -> CtyType:
    """Parse cty type JSON; raises TypeJsonError naming what is wrong and where."""
    try:
        return _type_from_json_cached(data)
    except TypeJsonError:
        raise
    except TypeError as exc:  # unhashable input cannot be type JSON either
        raise TypeJsonError(f"cty type JSON must be bytes or str, got {type(data).__name__}") from exc


@lru_cache(maxsize=1024)
def _type_from_json_cached(data: bytes | str) -> CtyType:
    if not isinstance(data, bytes | str):
        raise TypeJsonError(f"cty type JSON must be bytes or str, got {type(data).__name__}")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TypeJsonError(f"invalid cty type JSON: {exc}") from None
    return type_from_obj(obj)


def type_from_obj(obj: Any, where: str = "") -> CtyType:
    """Build a type from the already-parsed JSON form (see `type_to_obj`)."""
    at = f" at {where}" if where else ""
    if isinstance(obj, str):
        primitive = _PRIMITIVES.get(obj)
        if primitive is None:
            raise TypeJsonError(f"invalid cty type JSON{at}: unknown primitive type {obj!r}")
        return primitive
    if not isinstance(obj, list) or not obj or not isinstance(obj[0], str):
        raise TypeJsonError(
            f"invalid cty type JSON{at}: expected a type name or an array [kind, ...], got {_show(obj)}"
        )
    kind = obj[0]
    if kind in ("list", "set", "map"):
        if len(obj) != 2:
            raise TypeJsonError(f"invalid cty type JSON{at}: {kind} needs exactly one element type")
        element = type_from_obj(obj[1], f"{where}[1]")
        return List(element) if kind == "list" else Set(element) if kind == "set" else Map(element)
    if kind == "tuple":
        if len(obj) != 2 or not isinstance(obj[1], list):
            raise TypeJsonError(f'invalid cty type JSON{at}: tuple must be ["tuple", [element types...]]')
        return Tuple(type_from_obj(e, f"{where}[1][{i}]") for i, e in enumerate(obj[1]))
    if kind == "object":
        if len(obj) not in (2, 3) or not isinstance(obj[1], dict):
            raise TypeJsonError(
                f'invalid cty type JSON{at}: object must be ["object", {{attributes}}] '
                f'or ["object", {{attributes}}, [optional names]]'
            )
        attrs = {name: type_from_obj(a, f"{where}[1].{name}") for name, a in obj[1].items()}
        optional: list[str] = []
        if len(obj) == 3:
            names = obj[2]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise TypeJsonError(f"invalid cty type JSON{at}: optional attributes must be a list of names")
            missing = [n for n in names if n not in attrs]
            if missing:
                raise TypeJsonError(
                    f"invalid cty type JSON{at}: optional attribute {missing[0]!r} is not declared"
                )
            optional = names
        return Object(attrs, optional)
    raise TypeJsonError(f"invalid cty type JSON{at}: unknown type kind {kind!r}")


def _show(obj: Any) -> str:
    text = json.dumps(obj, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
