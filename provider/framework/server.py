"""ProviderServer: one method per tfplugin6.Provider RPC (snake_case), pb2 request in, pb2 response out.

Never raises. Exceptions become error diagnostics (`DiagnosticError` as given, anything else as an
"Internal Provider Error" with the traceback logged). RPCs the framework does not implement answer an
error diagnostic saying so. The plugin layer (the only grpc importer) delegates to these methods.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from google.protobuf.message import Message

from provider._proto import tfplugin6_pb2 as pb
from provider.framework.context import Context
from provider.framework.diagnostics import DiagnosticError, diagnostic_from_exception
from provider.framework.identity import Identity
from provider.framework.plan import plan_resource, unknown_attribute_names
from provider.framework.protocol import (
    decode_value,
    diagnostics_to_pb,
    encode_value,
    function_to_pb,
    identity_schema_to_pb,
    path_to_pb,
    schema_to_pb,
    timestamp,
)
from provider.framework.resource import (
    Action,
    DataSource,
    EphemeralResource,
    Function,
    FunctionError,
    ListResource,
    ListResult,
    MoveSource,
    Provider,
    Resource,
    State,
)
from provider.framework.schema import Schema
from provider.framework.semantic import keep_semantic_equals
from provider.framework.state import (
    decode_private,
    encode_private,
    fit_object,
    fit_plain_value,
    parse_raw_state,
    schema_object,
)
from provider.framework.validate import validate_config
from provider.framework.writeonly import refuse_without_support, with_write_only, without_write_only

log = logging.getLogger("provider.framework")
NO_PROVIDER_META = Schema()  # the framework reads no provider_meta block

R = TypeVar("R", bound=Message)

# RPCs whose work never waits: the framework's own, or hooks that must not do I/O (validation, state
# upgrades). The plugin serves them on its event loop, saving a thread hand-off each (see `runs_inline`).
NON_BLOCKING_RPCS = frozenset({
    "GetMetadata", "GetProviderSchema", "GetResourceIdentitySchemas", "GetFunctions", "StopProvider",
    "ValidateProviderConfig", "ValidateResourceConfig", "ValidateDataResourceConfig",
    "ValidateEphemeralResourceConfig", "ValidateListResourceConfig", "ValidateActionConfig",
    "UpgradeResourceState", "UpgradeResourceIdentity",
})
# RPCs that run a resource's own hooks: non-blocking only for a resource declared `blocking = False`
# (PlanResourceChange also for one declared `blocking_plan = False`).
RESOURCE_RPCS = frozenset({
    "PlanResourceChange", "ApplyResourceChange", "ReadResource", "ImportResourceState",
})


def _rpc(response: Callable[[], R]) -> Callable[[Callable[[Any, Any], R]], Callable[..., R]]:
    """Catch everything: an exception becomes an error diagnostic on an otherwise empty response."""

    def decorate(fn: Callable[[Any, Any], R]) -> Callable[..., R]:
        operation = "".join(part.title() for part in fn.__name__.split("_"))

        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, _context: Any = None) -> R:
            try:
                return fn(self, request)
            except Exception as exc:  # nothing may cross the RPC boundary
                resp = response()
                resp.diagnostics.extend(diagnostics_to_pb([diagnostic_from_exception(exc, operation)]))  # type: ignore[attr-defined]
                return resp

        return wrapper

    return decorate


class ProviderServer:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self._resources: dict[str, Resource] = {r.type_name: r for r in provider.resources()}
        self._data_sources: dict[str, DataSource] = {d.type_name: d for d in provider.data_sources()}
        self._ephemerals: dict[str, EphemeralResource] = {
            e.type_name: e for e in provider.ephemeral_resources()
        }
        self._functions: dict[str, Function] = {f.name: f for f in provider.functions()}
        self._listers: dict[str, ListResource] = {r.type_name: r for r in provider.list_resources()}
        self._actions: dict[str, Action] = {a.type_name: a for a in provider.actions()}
        self._stop = threading.Event()
        self._provider_data: Any = None
        self._terraform_version = ""
        self._schema_response: pb.GetProviderSchema.Response | None = None

    def runs_inline(self, rpc: str, request: Any) -> bool:
        """Whether serving `rpc` never waits, so the plugin may run it on its event loop."""
        if rpc in NON_BLOCKING_RPCS:
            return True
        if rpc in RESOURCE_RPCS:
            resource = self._resources.get(request.type_name)
            if resource is None:
                return False
            if rpc == "PlanResourceChange" and resource.blocking_plan is not None:
                return not resource.blocking_plan
            return not resource.blocking
        return False

    # -- helpers -------------------------------------------------------------------------------------

    def _context(self, type_name: str = "", private: bytes = b"") -> Context:
        return Context(
            stop=self._stop,
            provider_data=self._provider_data,
            type_name=type_name,
            private=decode_private(private),
            terraform_version=self._terraform_version,
        )

    def _lookup(self, table: dict[str, Any], type_name: str, kind: str) -> Any:
        found = table.get(type_name)
        if found is None:
            raise DiagnosticError(
                f"Unknown {kind} Type", f'This provider has no {kind.lower()} type "{type_name}".'
            )
        return found

    @staticmethod
    def _validate(
        target: Provider | Resource | DataSource | EphemeralResource | ListResource | Action,
        config: Any,
        ctx: Context,
    ) -> None:
        """Schema validators, then whole-configuration validators, then the author's hook."""
        validate_config(target.schema, config, ctx.diagnostics)
        if isinstance(config, dict):
            for validator in target.config_validators:
                validator.validate(config, ctx.diagnostics)
            target.validate_config(ctx, config)

    @staticmethod
    def _diags(ctx: Context) -> list[pb.Diagnostic]:
        return diagnostics_to_pb(ctx.diagnostics)

    @staticmethod
    def _identity_pb(resource: Resource, identity: Identity | None) -> pb.ResourceIdentityData | None:
        if resource.identity_schema is None or identity is None:
            return None
        data = encode_value(identity, resource.identity_schema.cty_type)
        return pb.ResourceIdentityData(identity_data=data)

    def _identity_of(
        self, resource: Resource, ctx: Context, state: State | None, fallback: pb.ResourceIdentityData
    ) -> pb.ResourceIdentityData | None:
        """The identity of `state` as sent to Terraform; `fallback` (the one Terraform holds) while the
        state does not determine it yet."""
        if resource.identity_schema is None:
            return None
        found = self._identity_pb(resource, resource.identity(ctx, state) if state is not None else None)
        if found is None and fallback.identity_data.msgpack + fallback.identity_data.json:
            return fallback
        return found

    # -- provider ------------------------------------------------------------------------------------

    def _capabilities(self) -> pb.ServerCapabilities:
        # MoveResourceState is advertised only when a resource can take moved state: otherwise
        # Terraform itself explains that `moved {}` across types is unsupported, at plan time.
        moves = any(type(r).move_state is not Resource.move_state for r in self._resources.values())
        return pb.ServerCapabilities(
            plan_destroy=True, get_provider_schema_optional=True, move_resource_state=moves
        )

    @_rpc(pb.GetMetadata.Response)
    def get_metadata(self, request: pb.GetMetadata.Request) -> pb.GetMetadata.Response:
        return pb.GetMetadata.Response(
            server_capabilities=self._capabilities(),
            resources=[pb.GetMetadata.ResourceMetadata(type_name=n) for n in self._resources],
            data_sources=[pb.GetMetadata.DataSourceMetadata(type_name=n) for n in self._data_sources],
            ephemeral_resources=[pb.GetMetadata.EphemeralMetadata(type_name=n) for n in self._ephemerals],
            functions=[pb.GetMetadata.FunctionMetadata(name=n) for n in self._functions],
            list_resources=[pb.GetMetadata.ListResourceMetadata(type_name=n) for n in self._listers],
            actions=[pb.GetMetadata.ActionMetadata(type_name=n) for n in self._actions],
        )

    @_rpc(pb.GetProviderSchema.Response)
    def get_provider_schema(self, request: pb.GetProviderSchema.Request) -> pb.GetProviderSchema.Response:
        if self._schema_response is None:  # built once: Terraform asks on every launch without a cache
            self._schema_response = pb.GetProviderSchema.Response(
                provider=schema_to_pb(self.provider.schema),
                resource_schemas={n: schema_to_pb(r.schema) for n, r in self._resources.items()},
                data_source_schemas={n: schema_to_pb(d.schema) for n, d in self._data_sources.items()},
                ephemeral_resource_schemas={n: schema_to_pb(e.schema) for n, e in self._ephemerals.items()},
                functions={n: function_to_pb(f) for n, f in self._functions.items()},
                list_resource_schemas={n: schema_to_pb(r.schema) for n, r in self._listers.items()},
                action_schemas={
                    n: pb.ActionSchema(schema=schema_to_pb(a.schema)) for n, a in self._actions.items()
                },
                provider_meta=schema_to_pb(NO_PROVIDER_META),
                server_capabilities=self._capabilities(),
            )
        return self._schema_response

    @_rpc(pb.GetFunctions.Response)
    def get_functions(self, request: pb.GetFunctions.Request) -> pb.GetFunctions.Response:
        return pb.GetFunctions.Response(functions={n: function_to_pb(f) for n, f in self._functions.items()})

    @_rpc(pb.GetResourceIdentitySchemas.Response)
    def get_resource_identity_schemas(
        self, request: pb.GetResourceIdentitySchemas.Request
    ) -> pb.GetResourceIdentitySchemas.Response:
        return pb.GetResourceIdentitySchemas.Response(
            identity_schemas={
                n: identity_schema_to_pb(r.identity_schema)
                for n, r in self._resources.items()
                if r.identity_schema is not None
            }
        )

    @_rpc(pb.ValidateProviderConfig.Response)
    def validate_provider_config(
        self, request: pb.ValidateProviderConfig.Request
    ) -> pb.ValidateProviderConfig.Response:
        schema = self.provider.schema
        config = decode_value(request.config, schema.cty_type)
        ctx = self._context()
        self._validate(self.provider, config, ctx)
        return pb.ValidateProviderConfig.Response(diagnostics=self._diags(ctx))

    @_rpc(pb.ConfigureProvider.Response)
    def configure_provider(self, request: pb.ConfigureProvider.Request) -> pb.ConfigureProvider.Response:
        self._terraform_version = request.terraform_version
        if self._stop.is_set():  # stopped during an earlier command of a long-lived (debug) process
            self._stop = threading.Event()
        config = decode_value(request.config, self.provider.schema.cty_type)
        ctx = self._context()
        data = self.provider.configure(ctx, config if config is not None else {})
        if not ctx.diagnostics.has_errors:
            self._provider_data = data
        return pb.ConfigureProvider.Response(diagnostics=self._diags(ctx))

    def stop_provider(
        self, request: pb.StopProvider.Request, _context: Any = None
    ) -> pb.StopProvider.Response:
        # Cancel in-flight work and whatever Terraform still sends in this command: it may send an
        # ApplyResourceChange it had already decided on after StopProvider (Ctrl-C right at "Creating...").
        # The next command's ConfigureProvider starts afresh (a long-lived debug process serves many).
        self._stop.set()
        log.info("StopProvider: cancelling in-flight operations")
        return pb.StopProvider.Response()

    # -- managed resources ---------------------------------------------------------------------------

    @_rpc(pb.ValidateResourceConfig.Response)
    def validate_resource_config(
        self, request: pb.ValidateResourceConfig.Request
    ) -> pb.ValidateResourceConfig.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        config = decode_value(request.config, resource.schema.cty_type)
        ctx = self._context(request.type_name)
        self._validate(resource, config, ctx)
        if not request.client_capabilities.write_only_attributes_allowed:
            refuse_without_support(resource.schema, config, ctx.diagnostics, resource.write_only_alternatives)
        return pb.ValidateResourceConfig.Response(diagnostics=self._diags(ctx))

    @_rpc(pb.UpgradeResourceState.Response)
    def upgrade_resource_state(
        self, request: pb.UpgradeResourceState.Request
    ) -> pb.UpgradeResourceState.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        schema = resource.schema
        if not request.raw_state.json and request.raw_state.flatmap:
            raise DiagnosticError(
                "Unable to Upgrade Resource State",
                "This state is in the legacy flatmap format, which this provider cannot read.",
            )
        raw = parse_raw_state(request.raw_state.json)
        ctx = self._context(request.type_name)
        if request.version == schema.version:
            state = fit_object(schema, raw)
        elif request.version > schema.version:
            raise DiagnosticError(
                "Unable to Upgrade Resource State",
                f"The state was written by a newer provider (schema version {request.version}; this provider "
                f"knows up to {schema.version}). Upgrade the provider.",
            )
        else:
            upgrader = resource.state_upgraders().get(request.version)
            if upgrader is None:
                raise DiagnosticError(
                    "Unable to Upgrade Resource State",
                    f"This provider cannot upgrade {request.type_name} state from schema version "
                    f"{request.version} to {schema.version}.",
                )
            prior = fit_object(upgrader.prior_schema, raw) if upgrader.prior_schema is not None else raw
            upgraded = upgrader.upgrade(ctx, prior)
            state = fit_object(schema, upgraded) if not ctx.diagnostics.has_errors else None
        resp = pb.UpgradeResourceState.Response(diagnostics=self._diags(ctx))
        if not ctx.diagnostics.has_errors:
            resp.upgraded_state.CopyFrom(encode_value(state, schema.cty_type))
        return resp

    @_rpc(pb.ReadResource.Response)
    def read_resource(self, request: pb.ReadResource.Request) -> pb.ReadResource.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        t = resource.schema.cty_type
        state = decode_value(request.current_state, t)
        ctx = self._context(request.type_name, request.private)
        try:
            new_state = resource.read(ctx, state) if state is not None else None
            new_state = keep_semantic_equals(resource.schema, state, new_state)
            new_state = without_write_only(resource.schema, new_state)
        except Exception as exc:  # answered below with the current state kept
            ctx.diagnostics.append(diagnostic_from_exception(exc, "ReadResource"))
            new_state = state
        resp = pb.ReadResource.Response(diagnostics=self._diags(ctx))
        if ctx.diagnostics.has_errors:
            resp.new_state.CopyFrom(request.current_state)  # keep what Terraform has
            resp.private = request.private
            new_state = state
        else:
            resp.new_state.CopyFrom(encode_value(new_state, t))
            resp.private = encode_private(ctx.private)
        identity = self._identity_of(resource, ctx, new_state, request.current_identity)
        if identity is not None and new_state is not None:
            resp.new_identity.CopyFrom(identity)
        return resp

    @_rpc(pb.PlanResourceChange.Response)
    def plan_resource_change(self, request: pb.PlanResourceChange.Request) -> pb.PlanResourceChange.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        schema = resource.schema
        t = schema.cty_type
        prior = decode_value(request.prior_state, t)
        # A write-only value is never planned: alone it is no change (the resource reads it from config).
        proposed = without_write_only(schema, decode_value(request.proposed_new_state, t))
        config = decode_value(request.config, t)
        planned, replace = plan_resource(schema, config, prior, proposed)
        ctx = self._context(request.type_name, request.prior_private)
        ctx.requires_replace = replace
        modified = resource.modify_plan(ctx, planned, prior, config)
        if modified is not None or planned is None:
            planned = without_write_only(schema, modified)
        resp = pb.PlanResourceChange.Response(diagnostics=self._diags(ctx))
        if ctx.diagnostics.has_errors:
            return resp
        resp.planned_state.CopyFrom(encode_value(planned, t))
        seen = set()
        for path in ctx.requires_replace:
            if path not in seen:
                seen.add(path)
                resp.requires_replace.append(path_to_pb(path))
        resp.planned_private = encode_private(ctx.private)
        if planned is not None:
            # Known identity values are planned; an update keeps the prior identity. On create and
            # replace Terraform accepts none: apply returns it.
            replacing = prior is None or bool(ctx.requires_replace)
            fallback = pb.ResourceIdentityData() if replacing else request.prior_identity
            identity = self._identity_of(resource, ctx, planned, fallback)
            if identity is not None:
                resp.planned_identity.CopyFrom(identity)
        return resp

    @_rpc(pb.ApplyResourceChange.Response)
    def apply_resource_change(
        self, request: pb.ApplyResourceChange.Request
    ) -> pb.ApplyResourceChange.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        t = resource.schema.cty_type
        prior = decode_value(request.prior_state, t)
        planned = decode_value(request.planned_state, t)
        # Create and update see the configuration's write-only values; no state returned keeps them.
        planned = with_write_only(resource.schema, planned, decode_value(request.config, t))
        ctx = self._context(request.type_name, request.planned_private)
        try:
            new_state = self._apply(resource, ctx, prior, planned)
        except Exception as exc:  # keep the prior state in Terraform's hands
            ctx.diagnostics.append(diagnostic_from_exception(exc, "ApplyResourceChange"))
            new_state = prior
        new_state = without_write_only(resource.schema, new_state)
        resp = pb.ApplyResourceChange.Response(diagnostics=self._diags(ctx))
        resp.new_state.CopyFrom(encode_value(new_state, t))
        resp.private = encode_private(ctx.private) if new_state is not None else b""
        if new_state is not None:
            identity = self._identity_of(resource, ctx, new_state, request.planned_identity)
            if identity is not None:
                resp.new_identity.CopyFrom(identity)
        return resp

    def _apply(
        self, resource: Resource, ctx: Context, prior: State | None, planned: State | None
    ) -> State | None:
        if planned is None:
            resource.delete(ctx, prior or {})
            return prior if ctx.diagnostics.has_errors else None
        if prior is None:
            created = keep_semantic_equals(resource.schema, planned, resource.create(ctx, planned))
            if created is None and not ctx.diagnostics.has_errors:
                ctx.error(
                    "Missing Resource State After Create",
                    f"{resource.type_name}: create returned no state. This is a bug in the provider.",
                )
            return self._known_or(ctx, resource, created, None)
        updated = keep_semantic_equals(resource.schema, planned, resource.update(ctx, planned, prior))
        if updated is None:
            if not ctx.diagnostics.has_errors:
                ctx.error(
                    "Missing Resource State After Update",
                    f"{resource.type_name}: update returned no state. This is a bug in the provider.",
                )
            return prior
        return self._known_or(ctx, resource, updated, prior)

    @staticmethod
    def _known_or(
        ctx: Context, resource: Resource, state: State | None, fallback: State | None
    ) -> State | None:
        if state is None:
            return fallback
        unknown = unknown_attribute_names(state)
        if not unknown:
            return state
        ctx.error(
            "Provider Returned Unknown Values After Apply",
            f"{resource.type_name}: {', '.join(unknown)} still unknown after apply. This is a bug in the "
            "provider.",
        )
        return fallback

    @_rpc(pb.ImportResourceState.Response)
    def import_resource_state(
        self, request: pb.ImportResourceState.Request
    ) -> pb.ImportResourceState.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        ctx = self._context(request.type_name)
        given = request.identity
        by_identity = bool(given.identity_data.msgpack or given.identity_data.json)
        if by_identity:
            if resource.identity_schema is None:
                raise DiagnosticError(
                    "Resource Identity Not Supported",
                    f"{request.type_name} has no resource identity: import it by id instead.",
                )
            identity = decode_value(given.identity_data, resource.identity_schema.cty_type)
            state = resource.import_identity(ctx, identity)
            wanted = f"identity {_describe(identity)}"
        else:
            state = resource.import_state(ctx, request.id)
            wanted = f'id "{request.id}"'
        resp = pb.ImportResourceState.Response(diagnostics=self._diags(ctx))
        if ctx.diagnostics.has_errors:
            return resp
        if state is None:
            raise DiagnosticError(
                "Cannot Import Non-Existent Remote Object", f"No {request.type_name} with {wanted} exists."
            )
        state = without_write_only(resource.schema, fit_object(resource.schema, state))
        imported = pb.ImportResourceState.ImportedResource(
            type_name=request.type_name,
            state=encode_value(state, resource.schema.cty_type),
            private=encode_private(ctx.private),
        )
        identity_pb = self._identity_of(resource, ctx, state, given)
        if identity_pb is not None:
            imported.identity.CopyFrom(identity_pb)
        resp.imported_resources.append(imported)
        return resp

    @_rpc(pb.MoveResourceState.Response)
    def move_resource_state(self, request: pb.MoveResourceState.Request) -> pb.MoveResourceState.Response:
        resource: Resource = self._lookup(self._resources, request.target_type_name, "Resource")
        ctx = self._context(request.target_type_name)
        source = MoveSource(
            provider_address=request.source_provider_address,
            type_name=request.source_type_name,
            schema_version=request.source_schema_version,
            state=parse_raw_state(request.source_state.json),
            private=request.source_private,
        )
        state = resource.move_state(ctx, source)
        resp = pb.MoveResourceState.Response(diagnostics=self._diags(ctx))
        if ctx.diagnostics.has_errors:
            return resp
        if state is None:
            raise DiagnosticError(
                "Unable to Move Resource State",
                f"{request.target_type_name} cannot take state from {request.source_type_name} "
                f"({request.source_provider_address}).",
            )
        state = fit_object(resource.schema, state)
        resp.target_state.CopyFrom(encode_value(state, resource.schema.cty_type))
        resp.target_private = encode_private(ctx.private)
        identity = self._identity_of(resource, ctx, state, pb.ResourceIdentityData())
        if identity is not None:
            resp.target_identity.CopyFrom(identity)
        return resp

    # -- data sources --------------------------------------------------------------------------------

    @_rpc(pb.ValidateDataResourceConfig.Response)
    def validate_data_resource_config(
        self, request: pb.ValidateDataResourceConfig.Request
    ) -> pb.ValidateDataResourceConfig.Response:
        source: DataSource = self._lookup(self._data_sources, request.type_name, "Data Source")
        config = decode_value(request.config, source.schema.cty_type)
        ctx = self._context(request.type_name)
        self._validate(source, config, ctx)
        return pb.ValidateDataResourceConfig.Response(diagnostics=self._diags(ctx))

    @_rpc(pb.ReadDataSource.Response)
    def read_data_source(self, request: pb.ReadDataSource.Request) -> pb.ReadDataSource.Response:
        source: DataSource = self._lookup(self._data_sources, request.type_name, "Data Source")
        t = source.schema.cty_type
        config = decode_value(request.config, t)
        ctx = self._context(request.type_name)
        state = source.read(ctx, config)
        if state is not None and unknown_attribute_names(state):
            ctx.error(
                "Provider Returned Unknown Values",
                f"{request.type_name}: {', '.join(unknown_attribute_names(state))} unknown after read. "
                "This is a bug in the provider.",
            )
        resp = pb.ReadDataSource.Response(diagnostics=self._diags(ctx))
        if not ctx.diagnostics.has_errors:
            resp.state.CopyFrom(encode_value(state, t))
        return resp

    # -- ephemeral resources -------------------------------------------------------------------------

    @_rpc(pb.ValidateEphemeralResourceConfig.Response)
    def validate_ephemeral_resource_config(
        self, request: pb.ValidateEphemeralResourceConfig.Request
    ) -> pb.ValidateEphemeralResourceConfig.Response:
        eph: EphemeralResource = self._lookup(self._ephemerals, request.type_name, "Ephemeral Resource")
        config = decode_value(request.config, eph.schema.cty_type)
        ctx = self._context(request.type_name)
        self._validate(eph, config, ctx)
        return pb.ValidateEphemeralResourceConfig.Response(diagnostics=self._diags(ctx))

    @_rpc(pb.OpenEphemeralResource.Response)
    def open_ephemeral_resource(
        self, request: pb.OpenEphemeralResource.Request
    ) -> pb.OpenEphemeralResource.Response:
        eph: EphemeralResource = self._lookup(self._ephemerals, request.type_name, "Ephemeral Resource")
        t = eph.schema.cty_type
        config = decode_value(request.config, t)
        ctx = self._context(request.type_name)
        opened = eph.open(ctx, config)
        resp = pb.OpenEphemeralResource.Response(diagnostics=self._diags(ctx))
        if ctx.diagnostics.has_errors:
            return resp
        resp.result.CopyFrom(encode_value(fit_object(eph.schema, opened.result), t))
        if opened.renew_at is not None:
            resp.renew_at.CopyFrom(timestamp(opened.renew_at))
        if ctx.private:
            resp.private = encode_private(ctx.private)
        return resp

    @_rpc(pb.RenewEphemeralResource.Response)
    def renew_ephemeral_resource(
        self, request: pb.RenewEphemeralResource.Request
    ) -> pb.RenewEphemeralResource.Response:
        eph: EphemeralResource = self._lookup(self._ephemerals, request.type_name, "Ephemeral Resource")
        ctx = self._context(request.type_name, request.private)
        renew_at = eph.renew(ctx)
        resp = pb.RenewEphemeralResource.Response(diagnostics=self._diags(ctx))
        if renew_at is not None:
            resp.renew_at.CopyFrom(timestamp(renew_at))
        if ctx.private:
            resp.private = encode_private(ctx.private)
        return resp

    @_rpc(pb.CloseEphemeralResource.Response)
    def close_ephemeral_resource(
        self, request: pb.CloseEphemeralResource.Request
    ) -> pb.CloseEphemeralResource.Response:
        eph: EphemeralResource = self._lookup(self._ephemerals, request.type_name, "Ephemeral Resource")
        ctx = self._context(request.type_name, request.private)
        eph.close(ctx)
        return pb.CloseEphemeralResource.Response(diagnostics=self._diags(ctx))

    # -- list resources (terraform query) ------------------------------------------------------------

    @_rpc(pb.ValidateListResourceConfig.Response)
    def validate_list_resource_config(
        self, request: pb.ValidateListResourceConfig.Request
    ) -> pb.ValidateListResourceConfig.Response:
        lister: ListResource = self._lookup(self._listers, request.type_name, "List Resource")
        config = decode_value(request.config, lister.schema.cty_type)
        ctx = self._context(request.type_name)
        self._validate(lister, config, ctx)
        return pb.ValidateListResourceConfig.Response(diagnostics=self._diags(ctx))

    def list_resource(
        self, request: pb.ListResource.Request, _context: Any = None
    ) -> Iterator[pb.ListResource.Event]:
        """A stream of found objects; problems travel as diagnostics in events (an error ends it)."""
        sent = 0
        try:
            lister: ListResource = self._lookup(self._listers, request.type_name, "List Resource")
            resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
            if resource.identity_schema is None:
                raise DiagnosticError(
                    "List Resource Without Identity",
                    f"{request.type_name} declares no identity_schema. This is a bug in the provider.",
                )
            config = decode_value(request.config, lister.schema.cty_type)
            ctx = self._context(request.type_name)
            wanted = request.include_resource_object
            reported = 0
            for result in lister.list(ctx, config or {}, include_state=wanted):
                if ctx.diagnostics.has_errors:
                    break
                event = self._list_event(resource, ctx, result, wanted)
                event.diagnostic.extend(diagnostics_to_pb(ctx.diagnostics[reported:]))
                reported = len(ctx.diagnostics)
                yield event
                sent += 1
                if 0 < request.limit <= sent:
                    return
            if len(ctx.diagnostics) > reported:
                yield pb.ListResource.Event(diagnostic=diagnostics_to_pb(ctx.diagnostics[reported:]))
        except Exception as exc:  # nothing may cross the RPC boundary
            diagnostic = diagnostic_from_exception(exc, "ListResource")
            yield pb.ListResource.Event(diagnostic=diagnostics_to_pb([diagnostic]))

    @staticmethod
    def _list_event(
        resource: Resource, ctx: Context, result: ListResult, wanted: bool
    ) -> pb.ListResource.Event:
        schema = resource.identity_schema
        assert schema is not None
        identity = schema.of(result.identity)
        if identity is None:
            raise DiagnosticError(
                "Incomplete Identity In List Result",
                f"{resource.type_name} result {result.display_name!r} lacks identity values "
                f"({', '.join(schema.attributes)}). This is a bug in the provider.",
            )
        event = pb.ListResource.Event(
            identity=pb.ResourceIdentityData(identity_data=encode_value(identity, schema.cty_type)),
            display_name=result.display_name,
        )
        if wanted and result.state is not None:
            state = schema_object(resource.schema, result.state)  # a value, not stored JSON
            event.resource_object.CopyFrom(encode_value(state, resource.schema.cty_type))
        return event

    # -- actions (terraform apply -invoke, action_trigger) --------------------------------------------

    @_rpc(pb.ValidateActionConfig.Response)
    def validate_action_config(
        self, request: pb.ValidateActionConfig.Request
    ) -> pb.ValidateActionConfig.Response:
        action: Action = self._lookup(self._actions, request.type_name, "Action")
        config = decode_value(request.config, action.schema.cty_type)
        ctx = self._context(request.type_name)
        self._validate(action, config, ctx)
        return pb.ValidateActionConfig.Response(diagnostics=self._diags(ctx))

    @_rpc(pb.PlanAction.Response)
    def plan_action(self, request: pb.PlanAction.Request) -> pb.PlanAction.Response:
        action: Action = self._lookup(self._actions, request.action_type, "Action")
        config = decode_value(request.config, action.schema.cty_type)
        ctx = self._context(request.action_type)
        action.plan(ctx, config if config is not None else {})
        return pb.PlanAction.Response(diagnostics=self._diags(ctx))

    def invoke_action(
        self, request: pb.InvokeAction.Request, _context: Any = None
    ) -> Iterator[pb.InvokeAction.Event]:
        """Progress events as the action yields messages, then exactly one completed event carrying
        every diagnostic (an exception included): Terraform reads the stream until it ends."""
        ctx = self._context(request.action_type)
        try:
            action: Action = self._lookup(self._actions, request.action_type, "Action")
            config = decode_value(request.config, action.schema.cty_type)
            for message in action.invoke(ctx, config if config is not None else {}):
                yield pb.InvokeAction.Event(progress=pb.InvokeAction.Event.Progress(message=message))
                if ctx.diagnostics.has_errors:
                    break
        except Exception as exc:  # nothing may cross the RPC boundary
            ctx.diagnostics.append(diagnostic_from_exception(exc, "InvokeAction"))
        completed = pb.InvokeAction.Event.Completed(diagnostics=self._diags(ctx))
        yield pb.InvokeAction.Event(completed=completed)

    # -- functions -----------------------------------------------------------------------------------

    def call_function(
        self, request: pb.CallFunction.Request, _context: Any = None
    ) -> pb.CallFunction.Response:
        try:
            fn = self._functions.get(request.name)
            if fn is None:
                return _function_error(f'This provider has no function "{request.name}".')
            params = list(fn.parameters)
            if len(request.arguments) < len(params) or (
                fn.variadic is None and len(request.arguments) > len(params)
            ):
                return _function_error(
                    f"{request.name} takes {len(params)} arguments, got {len(request.arguments)}."
                )
            args = []
            for i, dv in enumerate(request.arguments):
                param = params[i] if i < len(params) else fn.variadic
                assert param is not None
                args.append(decode_value(dv, param.type))
            result = fn.call(self._context(), *args)
            return pb.CallFunction.Response(result=encode_value(result, fn.return_type))
        except FunctionError as exc:
            return _function_error(exc.text, exc.argument)
        except Exception as exc:
            return _function_error(diagnostic_from_exception(exc, f"function {request.name}").detail)

    # -- everything else -----------------------------------------------------------------------------

    @_rpc(pb.UpgradeResourceIdentity.Response)
    def upgrade_resource_identity(
        self, request: pb.UpgradeResourceIdentity.Request
    ) -> pb.UpgradeResourceIdentity.Response:
        resource: Resource = self._lookup(self._resources, request.type_name, "Resource")
        schema = resource.identity_schema
        if schema is None:
            raise DiagnosticError(
                "Resource Identity Not Supported", f"{request.type_name} has no resource identity schema."
            )
        raw = parse_raw_state(request.raw_identity.json)
        if request.version > schema.version:
            raise DiagnosticError(
                "Unable to Upgrade Resource Identity",
                f"The identity was written by a newer provider (identity version {request.version}; this "
                f"provider knows up to {schema.version}). Upgrade the provider.",
            )
        if request.version < schema.version:
            upgrader = resource.identity_upgraders().get(request.version)
            if upgrader is None:
                raise DiagnosticError(
                    "Unable to Upgrade Resource Identity",
                    f"This provider cannot upgrade {request.type_name} identity from version "
                    f"{request.version} to {schema.version}.",
                )
            raw = upgrader.upgrade(raw)
        if not isinstance(raw, dict):
            raise DiagnosticError(
                "Unable to Upgrade Resource Identity",
                f"The stored {request.type_name} identity is not an object.",
            )
        identity = {name: fit_plain_value(raw.get(name)) for name in schema.attributes}
        return pb.UpgradeResourceIdentity.Response(
            upgraded_identity=pb.ResourceIdentityData(identity_data=encode_value(identity, schema.cty_type))
        )

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Any other RPC of the proto: answer an error diagnostic saying it is not supported."""
        method = _rpc_method(name)
        if method is None:
            raise AttributeError(name)
        from google.protobuf import message_factory

        response_class = message_factory.GetMessageClass(method.output_type)

        def unsupported(request: Any, _context: Any = None) -> Any:
            resp: Any = response_class()
            if "diagnostics" in response_class.DESCRIPTOR.fields_by_name:
                resp.diagnostics.append(
                    pb.Diagnostic(
                        severity=pb.Diagnostic.ERROR,
                        summary="Unsupported Operation",
                        detail=f"This provider does not implement {method.name}.",
                    )
                )
            return resp

        return unsupported


def _describe(identity: Any) -> str:
    if not isinstance(identity, dict):
        return "(none)"
    return "{" + ", ".join(f'{k} = "{v}"' for k, v in identity.items() if v is not None) + "}"


def _rpc_method(snake: str) -> Any:
    camel = "".join(part.title() for part in snake.split("_"))
    service = pb.DESCRIPTOR.services_by_name["Provider"]
    return service.methods_by_name.get(camel)


def _function_error(text: str, argument: int | None = None) -> pb.CallFunction.Response:
    err = pb.FunctionError(text=text)
    if argument is not None:
        err.function_argument = argument
    return pb.CallFunction.Response(error=err)
