"""A small provider framework in the style of HashiCorp's terraform-plugin-framework.

Knows Terraform semantics (schemas, plans, diagnostics), nothing of gpucloud. Resource authors import
from here; `provider.framework.server.ProviderServer` is what the plugin layer serves. See
docs/framework.md.
"""

from provider.framework.context import Context
from provider.framework.diagnostics import Cancelled, Diagnostic, DiagnosticError, Diagnostics
from provider.framework.planmodifiers import (
    PlanModification,
    requires_replace,
    requires_replace_if,
    use_state_for_unknown,
)
from provider.framework.resource import (
    DataSource,
    EphemeralResource,
    EphemeralResult,
    Function,
    FunctionError,
    MoveSource,
    Parameter,
    Provider,
    Resource,
    State,
    StateUpgrader,
    root,
)
from provider.framework.schema import (
    Attribute,
    Block,
    BoolAttribute,
    DynamicAttribute,
    Float64Attribute,
    Int64Attribute,
    ListAttribute,
    ListNestedAttribute,
    ListNestedBlock,
    MapAttribute,
    MapNestedAttribute,
    NumberAttribute,
    ObjectAttribute,
    Schema,
    SetAttribute,
    SetNestedAttribute,
    SetNestedBlock,
    SingleNestedAttribute,
    SingleNestedBlock,
    StringAttribute,
)
from provider.framework.timeouts import parse_duration, timeout, timeouts_block

__all__ = [
    "Attribute",
    "Block",
    "BoolAttribute",
    "Cancelled",
    "Context",
    "DataSource",
    "Diagnostic",
    "DiagnosticError",
    "Diagnostics",
    "DynamicAttribute",
    "EphemeralResource",
    "EphemeralResult",
    "Float64Attribute",
    "Function",
    "FunctionError",
    "Int64Attribute",
    "ListAttribute",
    "ListNestedAttribute",
    "ListNestedBlock",
    "MapAttribute",
    "MapNestedAttribute",
    "MoveSource",
    "NumberAttribute",
    "ObjectAttribute",
    "Parameter",
    "PlanModification",
    "Provider",
    "Resource",
    "Schema",
    "SetAttribute",
    "SetNestedAttribute",
    "SetNestedBlock",
    "SingleNestedAttribute",
    "SingleNestedBlock",
    "State",
    "StateUpgrader",
    "StringAttribute",
    "parse_duration",
    "requires_replace",
    "requires_replace_if",
    "root",
    "timeout",
    "timeouts_block",
    "use_state_for_unknown",
]
