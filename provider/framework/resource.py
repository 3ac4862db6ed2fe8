"""What provider authors subclass: Provider, Resource, DataSource, EphemeralResource, ListResource,
Action, Function.

Values are plain Python (see provider.cty): objects are dicts holding every attribute, null is None,
unknown is `provider.cty.UNKNOWN`. Methods get a `Context` first; they return values and report problems
through `ctx.error(...)` or by raising `DiagnosticError`. Any other exception becomes an "Internal
Provider Error" diagnostic (traceback in the log): nothing crashes the plugin.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from provider.cty import AttributePath, CtyType, GetAttr
from provider.framework.context import Context
from provider.framework.diagnostics import DiagnosticError
from provider.framework.identity import Identity, IdentitySchema, IdentityUpgrader
from provider.framework.schema import Schema
from provider.framework.state import schema_object
from provider.framework.validators import ConfigValidator

State = dict[str, Any]


@dataclass(frozen=True)
class StateUpgrader:
    """Upgrades state stored at one older schema version straight to the current version.

    `prior_schema` (when given) fits the stored JSON first (missing attributes null); `upgrade` returns
    the state for the current schema (missing attributes are filled in with null afterwards)."""

    upgrade: Callable[[Context, Any], State]
    prior_schema: Schema | None = None


@dataclass(frozen=True)
class MoveSource:
    """A resource being moved (`moved {}` block) from another type or provider into this one."""

    provider_address: str
    type_name: str
    schema_version: int
    state: Any  # parsed JSON of the stored state
    private: bytes = b""


class Resource:
    """A managed resource. Override `create`, `read`, `update`, `delete` (and hooks as needed)."""

    type_name: ClassVar[str] = ""
    schema: Schema = Schema()
    # Whole-configuration checks such as `exactly_one_of("id", "name")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()
    # Set to an attribute name (usually "id") to import by that attribute: `terraform import ADDR ID`
    # then reads the object with only that attribute set.
    import_id_attribute: ClassVar[str | None] = None
    # Resource identity (Terraform 1.12+): declare it to support `import { identity = {...} }` and
    # `terraform query`. By default each identity attribute is the same-named state attribute.
    identity_schema: IdentitySchema | None = None
    # False only when no hook of this resource ever waits (no network, files or sleeps): its plan, apply,
    # read and import RPCs are then served on the plugin's event loop instead of a worker thread.
    blocking: ClassVar[bool] = True
    # False when planning never waits though other hooks do (`modify_plan` and the schema's plan
    # modifiers call no API): PlanResourceChange alone is then served on the event loop. None: as `blocking`.
    blocking_plan: ClassVar[bool | None] = None
    # Per write-only attribute, the attribute a Terraform older than 1.11 should set instead (named in the
    # error refusing the write-only one there).
    write_only_alternatives: ClassVar[Mapping[str, str]] = {}

    def create(self, ctx: Context, plan: State) -> State | None:
        raise NotImplementedError

    def read(self, ctx: Context, state: State) -> State | None:
        """Current remote state; None when the object is gone (Terraform then plans to re-create it)."""
        return state

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        raise DiagnosticError(
            "Update Not Supported",
            f"{self.type_name} cannot be updated in place; this is a bug in the provider.",
        )

    def delete(self, ctx: Context, state: State) -> None:
        raise NotImplementedError

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks; values may be unknown (never reject those)."""

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        """Adjust the plan after defaults and plan modifiers. `plan` is None on destroy. Add paths to
        `ctx.requires_replace` to force replacement."""
        return plan

    def import_state(self, ctx: Context, import_id: str) -> State | None:
        if self.import_id_attribute is None:
            raise DiagnosticError(
                "Resource Import Not Implemented", f"{self.type_name} does not support import."
            )
        return schema_object(self.schema, {self.import_id_attribute: import_id})

    def identity(self, ctx: Context, state: State) -> Identity | None:
        """The identity of the object in `state` (None while it is not wholly known)."""
        if self.identity_schema is None:
            return None
        return self.identity_schema.of(state)

    def import_identity(self, ctx: Context, identity: Identity) -> State | None:
        """The state to import from an identity (`import { identity = {...} }`): by default the
        same-named attributes set and all else null; `read` then fills it in."""
        if self.identity_schema is None:
            raise DiagnosticError(
                "Resource Identity Not Supported", f"{self.type_name} cannot be imported by identity."
            )
        values = {k: v for k, v in identity.items() if k in self.schema.attributes and v is not None}
        return schema_object(self.schema, values)

    def identity_upgraders(self) -> dict[int, IdentityUpgrader]:
        """Upgraders keyed by the stored identity version they read (each goes straight to
        `identity_schema.version`)."""
        return {}

    def state_upgraders(self) -> dict[int, StateUpgrader]:
        """Upgraders keyed by the stored version they read (each goes straight to `schema.version`)."""
        return {}

    def move_state(self, ctx: Context, source: MoveSource) -> State | None:
        """State for this resource from `source`, or None when this resource cannot take it."""
        return None


class DataSource:
    type_name: ClassVar[str] = ""
    schema: Schema = Schema()
    # Whole-configuration checks such as `exactly_one_of("id", "name")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()

    def read(self, ctx: Context, config: State) -> State | None:
        raise NotImplementedError

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks; values may be unknown."""


class ListResult:
    """One object found by a list resource: its identity (required), a name for humans, and its full
    state (used by `terraform query -generate-config-out`; may be None when not asked for). A plain
    class: a dataclass costs ~0.4 ms of import on every provider launch."""

    __slots__ = ("display_name", "identity", "state")

    def __init__(self, identity: Identity, display_name: str, state: State | None = None) -> None:
        self.identity = identity
        self.display_name = display_name
        self.state = state


class ListResource:
    """Finds existing objects of one managed resource type for `terraform query` (Terraform 1.14+):

        list "gpucloud_gpu_cluster" "found" {
          provider = gpucloud
          config { region = "us-east-1" }
        }

    `type_name` is the managed resource's type (which must declare an `identity_schema`); `schema` is
    the `config` block's (the filters). `list` yields results; `include_state` says whether Terraform
    wants each object's full state (skip costly reads when it does not)."""

    type_name: ClassVar[str] = ""
    schema: Schema = Schema()
    # Whole-configuration checks such as `conflicting("a", "b")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterable[ListResult]:
        raise NotImplementedError

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks of the `config` block; values may be unknown."""


@dataclass
class EphemeralResult:
    result: State
    renew_at: dt.datetime | None = None


class EphemeralResource:
    """Values that exist only while Terraform runs (credentials...): never stored in state or plan.
    `ctx.private` carries data from open to renew and close."""

    type_name: ClassVar[str] = ""
    schema: Schema = Schema()
    # Whole-configuration checks such as `exactly_one_of("id", "name")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()

    def open(self, ctx: Context, config: State) -> EphemeralResult:
        raise NotImplementedError

    def renew(self, ctx: Context) -> dt.datetime | None:
        """Extend the lease; return when to renew next (or None)."""
        return None

    def close(self, ctx: Context) -> None:
        """Release whatever `open` acquired."""

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks; values may be unknown."""


class Action:
    """An operation Terraform runs on request (Terraform 1.14+), not an object it keeps in state:

        action "gpucloud_cluster_node_action" "reboot" {
          config { cluster_id = "cls_..." node = "train-1" action = "restart" }
        }

    invoked by `terraform apply -invoke=action.gpucloud_cluster_node_action.reboot` or from a
    resource's `lifecycle { action_trigger { ... } }`. `plan` checks the configuration before anything
    runs (values may be unknown); `invoke` does the work, yielding one-line progress messages that
    Terraform shows as they come, and reports failure through `ctx.error` or `DiagnosticError`.
    Wait with `ctx.sleep` so that an interrupted Terraform (Ctrl-C) ends the wait."""

    type_name: ClassVar[str] = ""
    schema: Schema = Schema()
    # Whole-configuration checks such as `exactly_one_of("id", "name")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks; values may be unknown (never reject those)."""

    def plan(self, ctx: Context, config: State) -> None:
        """Checks that need the provider configured (the remote object exists...); values may be unknown."""

    def invoke(self, ctx: Context, config: State) -> Iterable[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Parameter:
    name: str
    type: CtyType
    description: str = ""
    allow_null: bool = False
    allow_unknown: bool = False


class FunctionError(Exception):
    """Raise from `Function.call`; `argument` is the index of the offending argument, if one is."""

    def __init__(self, text: str, argument: int | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.argument = argument


class Function:
    """A provider-defined function, called from HCL as `provider::<provider>::<name>(...)`."""

    name: ClassVar[str] = ""
    parameters: ClassVar[Sequence[Parameter]] = ()
    variadic: ClassVar[Parameter | None] = None
    return_type: ClassVar[CtyType]
    summary: ClassVar[str] = ""
    description: ClassVar[str] = ""
    deprecation_message: ClassVar[str] = ""

    def call(self, ctx: Context, *args: Any) -> Any:
        raise NotImplementedError


class Provider:
    """The provider itself: configuration schema, `configure`, and the lists of what it offers."""

    type_name: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    schema: Schema = Schema()
    # Whole-configuration checks such as `exactly_one_of("id", "name")` (validators module).
    config_validators: ClassVar[Sequence[ConfigValidator]] = ()

    def validate_config(self, ctx: Context, config: State) -> None:
        """Cross-attribute checks of the provider block; values may be unknown."""

    def configure(self, ctx: Context, config: State) -> Any:
        """Called once per process before resource operations; the return value is `ctx.provider_data`.
        Values may be unknown during plan (for example derived from another resource)."""
        return None

    def resources(self) -> Sequence[Resource]:
        return ()

    def data_sources(self) -> Sequence[DataSource]:
        return ()

    def ephemeral_resources(self) -> Sequence[EphemeralResource]:
        return ()

    def list_resources(self) -> Sequence[ListResource]:
        return ()

    def actions(self) -> Sequence[Action]:
        return ()

    def functions(self) -> Sequence[Function]:
        return ()


def root(name: str) -> AttributePath:
    """Attribute path of a top-level attribute, for diagnostics: `ctx.error(..., path=root("name"))`."""
    return AttributePath((GetAttr(name),))
