"""The plan algorithm (what terraform-plugin-framework does in PlanResourceChange), in three passes:

1. defaults: attributes null in the configuration take their schema default;
2. if the resource is being created or anything differs from the prior state, every computed attribute
   the configuration leaves null (and without a default) is planned unknown, so the provider may set it;
   when nothing differs the prior values stand and the plan is empty;
3. attribute plan modifiers run (use_state_for_unknown, requires_replace...), outermost first. A nested
   object a modifier restored from the prior state keeps its prior attributes (they are not marked
   unknown one level down), as in terraform-plugin-framework.

Destroy (a null proposal, sent because the `plan_destroy` capability is advertised) plans null.
Everything here is deterministic: the same inputs give the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from provider.cty import UNKNOWN, AttributePath, CtyType, is_unknown, is_wholly_known, values_equal
from provider.framework.planmodifiers import PlanModification
from provider.framework.schema import NestedAttribute, Schema
from provider.framework.walk import ElementFn, Node, map_elements

ROOT = AttributePath()


@dataclass(slots=True)
class _Run:
    config: Any
    prior: Any
    plan: Any
    changed: bool
    type: CtyType | None = None
    requires_replace: list[AttributePath] = field(default_factory=list)


def apply_defaults(node: Node, config: Any, plan: Any) -> Any:
    """Plan with every attribute that is null in `config` set to its default (copy on write)."""
    if not isinstance(plan, dict) or not isinstance(config, dict):
        return plan
    out: dict[str, Any] | None = None
    for name, attr in node.attributes.items():
        c = config.get(name)
        v = plan.get(name)
        if c is None and attr.has_default:
            new = attr.default_value()
        elif isinstance(attr, NestedAttribute) and c is not None and not is_unknown(c):
            new = map_elements(attr, attr.nesting, c, None, v, ROOT, _defaults_fn(attr))
        else:
            continue
        if new is not v:
            out = out if out is not None else dict(plan)
            out[name] = new
    for name, block in node.blocks.items():
        c = config.get(name)
        v = plan.get(name)
        new = map_elements(block, block.nesting, c, None, v, ROOT, _defaults_fn(block))
        if new is not v:
            out = out if out is not None else dict(plan)
            out[name] = new
    return out if out is not None else plan


def _defaults_fn(node: Node) -> ElementFn:
    def fn(config: Any, _prior: Any, plan: Any, _path: AttributePath) -> Any:
        return apply_defaults(node, config, plan)

    return fn


def _modify_fn(node: Node, run: _Run) -> ElementFn:
    def fn(config: Any, prior: Any, plan: Any, path: AttributePath) -> Any:
        return _modify(node, config, prior, plan, path, run)

    return fn


def _modify(node: Node, config: Any, prior: Any, plan: Any, path: AttributePath, run: _Run) -> Any:
    if not isinstance(plan, dict):
        return plan
    out: dict[str, Any] | None = None
    cfg = config if isinstance(config, dict) else {}
    pri = prior if isinstance(prior, dict) else {}
    for name, attr in node.attributes.items():
        c = cfg.get(name)
        p = pri.get(name)
        v = plan.get(name)
        apath = path.attr(name)
        new = v
        marked = run.changed and attr.computed and c is None and not attr.has_default
        if marked:
            new = UNKNOWN
        if attr.plan_modifiers:
            new = _run_modifiers(attr.plan_modifiers, apath, attr.cty_type, c, p, new, run)
        if isinstance(attr, NestedAttribute):
            # Restored whole by a modifier: its attributes keep their prior values.
            inner = replace(run, changed=False) if marked and not is_unknown(new) else run
            new = map_elements(attr, attr.nesting, c, p, new, apath, _modify_fn(attr, inner))
        if new is not v:
            out = out if out is not None else dict(plan)
            out[name] = new
    for name, block in node.blocks.items():
        c = cfg.get(name)
        p = pri.get(name)
        v = plan.get(name)
        bpath = path.attr(name)
        new = v
        if block.plan_modifiers:
            new = _run_modifiers(block.plan_modifiers, bpath, block.cty_type, c, p, new, run)
        new = map_elements(block, block.nesting, c, p, new, bpath, _modify_fn(block, run))
        if new is not v:
            out = out if out is not None else dict(plan)
            out[name] = new
    return out if out is not None else plan


def _run_modifiers(
    modifiers: Any, path: AttributePath, type_: Any, config: Any, prior: Any, plan: Any, run: _Run
) -> Any:
    m = PlanModification(
        path, type_, config, prior, plan, run.config, run.prior, run.plan, resource_type=run.type
    )
    for modifier in modifiers:
        modifier.modify(m)
    if m.requires_replace and path not in run.requires_replace:
        run.requires_replace.append(path)
    return m.plan_value


def plan_resource(schema: Schema, config: Any, prior: Any, proposed: Any) -> tuple[Any, list[AttributePath]]:
    """Planned new state and the paths that force replacement. `proposed is None` means destroy."""
    if proposed is None:
        return None, []
    planned = apply_defaults(schema, config, proposed)
    changed = prior is None or not values_equal(planned, prior, schema.cty_type)
    run = _Run(config, prior, planned, changed, schema.cty_type)
    planned = _modify(schema, config, prior, planned, ROOT, run)
    return planned, run.requires_replace


def unknown_attribute_names(value: Any) -> list[str]:
    """Top-level attributes of an object that are not wholly known (a state after apply must have none)."""
    if not isinstance(value, dict):
        return [] if is_wholly_known(value) else ["(the whole object)"]
    return [name for name, v in value.items() if not is_wholly_known(v)]
