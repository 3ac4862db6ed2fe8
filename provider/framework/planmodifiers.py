"""Attribute plan modifiers, applied by the plan algorithm after defaults and unknown-marking.

- `use_state_for_unknown()`: a computed value that does not change after creation (ids, creation times)
  keeps its prior value instead of showing "(known after apply)" on every update.
- `use_state_for_unknown_unless_changed(*names)`: the same, except when one of the named top-level
  attributes changes in this plan (a value derived from them: a node list that follows `node_count`).
- `requires_replace()`: a change to this attribute destroys and re-creates the resource.
- `requires_replace_if(condition, description)`: the same, only when `condition(request)` is true.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from provider.cty import AttributePath, CtyType, Object, is_unknown, values_equal


@dataclass(slots=True)
class PlanModification:
    """What a plan modifier sees and may change (`plan_value`, `requires_replace`)."""

    path: AttributePath
    type: CtyType
    config_value: Any
    state_value: Any
    plan_value: Any
    # Whole-resource values: state is None on create.
    resource_config: Any
    resource_state: Any
    resource_plan: Any
    requires_replace: bool = False
    resource_type: CtyType | None = None  # the resource's object type (to compare its attributes)

    @property
    def creating(self) -> bool:
        return self.resource_state is None

    def attribute_changes(self, name: str) -> bool:
        """Whether top-level attribute `name` differs between the prior state and the plan (an unknown
        planned value counts as a change)."""
        plan, state = self.resource_plan, self.resource_state
        if not isinstance(plan, dict) or not isinstance(state, dict):
            return True
        new = plan.get(name)
        if is_unknown(new):
            return True
        types = self.resource_type.attributes if isinstance(self.resource_type, Object) else {}
        attr_type = types.get(name)
        if attr_type is None:
            return bool(new != state.get(name))
        return not values_equal(new, state.get(name), attr_type)


class PlanModifier(Protocol):
    description: str

    def modify(self, m: PlanModification) -> None: ...


class UseStateForUnknown:
    description = "The value does not change after creation; the prior value is kept in plans."

    def modify(self, m: PlanModification) -> None:
        if m.creating or m.state_value is None or not is_unknown(m.plan_value) or is_unknown(m.config_value):
            return
        m.plan_value = m.state_value


class UseStateForUnknownUnlessChanged:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.description = "The prior value is kept in plans" + (
            " unless " + ", ".join(f"`{n}`" for n in names) + " changes." if names else "."
        )

    def modify(self, m: PlanModification) -> None:
        # Unlike use_state_for_unknown a null prior is kept too: a value that follows the named attributes
        # is absent for as long as they stay as they are (a cluster without Slurm has no Slurm section).
        if m.creating or not is_unknown(m.plan_value) or is_unknown(m.config_value):
            return
        if any(m.attribute_changes(name) for name in self.names):
            return
        m.plan_value = m.state_value


class RequiresReplaceIf:
    def __init__(self, condition: Callable[[PlanModification], bool], description: str) -> None:
        self.condition = condition
        self.description = description

    def modify(self, m: PlanModification) -> None:
        if m.creating or m.resource_plan is None:
            return
        if not is_unknown(m.plan_value) and values_equal(m.plan_value, m.state_value, m.type):
            return
        if self.condition(m):
            m.requires_replace = True


def use_state_for_unknown() -> UseStateForUnknown:
    return UseStateForUnknown()


def use_state_for_unknown_unless_changed(*names: str) -> UseStateForUnknownUnlessChanged:
    """Keep the prior value unless one of the top-level attributes `names` changes in this plan."""
    return UseStateForUnknownUnlessChanged(names)


def requires_replace() -> RequiresReplaceIf:
    return RequiresReplaceIf(lambda _m: True, "Changing this value forces a new resource to be created.")


def requires_replace_if(condition: Callable[[PlanModification], bool], description: str) -> RequiresReplaceIf:
    return RequiresReplaceIf(condition, description)
