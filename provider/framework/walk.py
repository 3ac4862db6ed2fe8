"""Walking nested values alongside their schema: pairs the elements of config, prior state and plan.

Lists pair by index and maps by key. Set elements have no identity, so a plan element is paired with
the config element whose configured (non-null) attributes it equals, and with the prior element that
agrees on those same attributes: the same correlation Terraform uses when it proposes a new state.
Paths never index into a set (the protocol cannot address set elements); they stop at the set.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from provider.cty import AttributePath, CtyType, is_unknown, values_equal
from provider.framework.schema import Block, NestedAttribute, Nesting, Schema

Node = Schema | Block | NestedAttribute
ElementFn = Callable[[Any, Any, Any, AttributePath], Any]


@functools.cache
def child_types(node: Node) -> dict[str, CtyType]:
    return {
        **{n: a.cty_type for n, a in node.attributes.items()},
        **{n: b.cty_type for n, b in node.blocks.items()},
    }


def _agrees(ref: dict[str, Any], candidate: Any, types: dict[str, CtyType]) -> bool:
    if not isinstance(candidate, dict):
        return False
    for key, value in ref.items():
        if value is None or is_unknown(value):
            continue
        if not values_equal(value, candidate.get(key), types[key]):
            return False
    return True


def _pick_config(elem: dict[str, Any], configs: list[Any], used: set[int], types: dict[str, CtyType]) -> Any:
    """The config element whose configured values the plan element carries."""
    for i, candidate in enumerate(configs):
        if i not in used and isinstance(candidate, dict) and _agrees(candidate, elem, types):
            used.add(i)
            return candidate
    return None


def _pick_prior(ref: dict[str, Any], priors: list[Any], used: set[int], types: dict[str, CtyType]) -> Any:
    """The prior element that agrees with `ref` (the config element) on every configured value."""
    for i, candidate in enumerate(priors):
        if i not in used and _agrees(ref, candidate, types):
            used.add(i)
            return candidate
    return None


def map_elements(
    node: Node, nesting: Nesting, config: Any, prior: Any, plan: Any, path: AttributePath, fn: ElementFn
) -> Any:
    """Apply `fn(config_elem, prior_elem, plan_elem, path)` to every object inside `plan`.

    Returns `plan` itself when nothing changed, so unchanged trees are not copied.
    """
    if plan is None or is_unknown(plan):
        return plan
    if nesting == "single":
        return fn(
            config if isinstance(config, dict) else None,
            prior if isinstance(prior, dict) else None,
            plan,
            path,
        )
    changed = False
    if nesting == "map":
        out_map: dict[str, Any] = {}
        for key, elem in plan.items():
            new = fn(_get(config, key), _get(prior, key), elem, path.element(key))
            changed = changed or new is not elem
            out_map[key] = new
        return out_map if changed else plan
    out: list[Any] = []
    if nesting == "list":
        for i, elem in enumerate(plan):
            new = fn(_at(config, i), _at(prior, i), elem, path.element(i))
            changed = changed or new is not elem
            out.append(new)
        return out if changed else plan
    types = child_types(node)
    configs = config if isinstance(config, list) else []
    priors = prior if isinstance(prior, list) else []
    used_c: set[int] = set()
    used_p: set[int] = set()
    for elem in plan:
        if not isinstance(elem, dict):
            out.append(elem)
            continue
        c = _pick_config(elem, configs, used_c, types)
        p = _pick_prior(c if c is not None else elem, priors, used_p, types)
        new = fn(c, p, elem, path)
        changed = changed or new is not elem
        out.append(new)
    return out if changed else plan


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _at(value: Any, i: int) -> Any:
    return value[i] if isinstance(value, list) and i < len(value) else None
