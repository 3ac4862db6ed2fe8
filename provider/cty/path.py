"""Attribute paths: where inside a value something is (for diagnostics and plan modifiers)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, SupportsIndex, overload


class GetAttr:
    """Step into an object attribute (or a nested block) by name."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("path steps are immutable")

    def __eq__(self, other: object) -> bool:
        return other.__class__ is GetAttr and other.name == self.name

    def __hash__(self) -> int:
        return hash((GetAttr, self.name))

    def __repr__(self) -> str:
        return f"GetAttr({self.name!r})"


class Index:
    """Step into a list/tuple/set element (int) or a map element (str key)."""

    __slots__ = ("key",)
    key: str | int

    def __init__(self, key: str | int) -> None:
        object.__setattr__(self, "key", key)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("path steps are immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Index:
            return False
        key = other.key
        return bool(key.__class__ is self.key.__class__ and key == self.key)

    def __hash__(self) -> int:
        return hash((Index, self.key.__class__, self.key))

    def __repr__(self) -> str:
        return f"Index({self.key!r})"


Step = GetAttr | Index


class AttributePath(tuple[Step, ...]):
    """An immutable sequence of steps from the root of a value; `AttributePath()` is the root."""

    __slots__ = ()

    def __new__(cls, steps: Iterable[Step] = ()) -> AttributePath:
        return super().__new__(cls, steps)

    def attr(self, name: str) -> AttributePath:
        return AttributePath((*self, GetAttr(name)))

    def element(self, key: str | int) -> AttributePath:
        return AttributePath((*self, Index(key)))

    def __add__(self, other: tuple[Step, ...]) -> AttributePath:  # type: ignore[override]
        return AttributePath((*self, *other))

    @overload
    def __getitem__(self, item: SupportsIndex) -> Step: ...
    @overload
    def __getitem__(self, item: slice) -> AttributePath: ...
    def __getitem__(self, item: SupportsIndex | slice) -> Step | AttributePath:
        if isinstance(item, slice):
            return AttributePath(super().__getitem__(item))
        return super().__getitem__(item)

    def __str__(self) -> str:
        return format_path(self)

    def __repr__(self) -> str:
        return f"AttributePath({list(self)!r})"


ROOT: Final = AttributePath()


def format_path(path: Iterable[Step]) -> str:
    """Human form of a path, as Terraform prints it: `nodes[0].name`, `labels["team"]`."""
    parts: list[str] = []
    for step in path:
        if step.__class__ is GetAttr:
            if parts:
                parts.append(".")
            parts.append(step.name)
        else:
            key = step.key  # type: ignore[union-attr]
            parts.append(f"[{key}]" if key.__class__ is int else f"[{json.dumps(key, ensure_ascii=False)}]")
    return "".join(parts)
