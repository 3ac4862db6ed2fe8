"""The REST-resource helper: a gpucloud object behind one API collection, with one create-failure policy.

The policy (every resource, `gpucloud_gpu_cluster` included):
- a create's Idempotency-Key is chosen at plan time and kept in private state, so every retry of that
  create (the client's, the next apply's) replays the first outcome instead of making a second object;
- a create refused outright (a 4xx), or one that never reached the API (every attempt failed to
  connect, or Ctrl-C before it was sent), made nothing: an error, no state;
- a create whose outcome is unknown (no answer, a 5xx or 429 after the client's retries) may have made
  the object. It is kept in state as an *unconfirmed create*, its id naming the key, with an error, so
  Terraform taints it: reads leave it as it is (a refresh never sends a create), and the replacing
  apply's delete replays the create with that key, which answers the object the first attempt made (or
  makes it now), and deletes that. Nothing the backend made is orphaned.
- reads remember the object's ETag, updates and deletes send it as If-Match; a 404 on read drops the
  object from state, on delete counts as done.

`RestResource` implements create/read/delete (and a PATCH for update) on a `Collection` of the typed
client; a resource gives its collection, its create body and its API-object-to-state mapping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from provider.client import (
    ApiError,
    ApiResponse,
    GpuCloudClient,
    RateLimited,
    TransportError,
    new_idempotency_key,
)
from provider.client import Cancelled as ClientCancelled
from provider.client.collections import Collection
from provider.framework import (
    Cancelled,
    Context,
    DiagnosticError,
    Resource,
    Schema,
    State,
    keep_semantic_equals,
)
from provider.framework.state import contains_unknown
from provider.resources._common import api_error, client_of, configured

IDEMPOTENCY_KEY = "create_idempotency_key"
# The id of an object whose create was never confirmed names that create's key. It has to live in the
# state values: Terraform does not hand a tainted object's private state to the delete that replaces it.
UNCONFIRMED_ID_PREFIX = "unconfirmed-create:"
ETAG_KEY = "etag"
# Label keys the API added at create (a team-scoped key's team label), which the configuration does not own.
API_LABELS_KEY = "api_labels"
UNCONFIRMED_CREATE = (
    "The API did not confirm the create, so it may have happened. The resource is kept in state as "
    "tainted, its id naming the create's Idempotency-Key: the next apply deletes whatever that create "
    "made (replaying it with the same key to find it) and creates it again, so nothing is left behind."
)
# Answers to a replayed create that say nothing about whether the first one made an object: its key is
# still running, or was used for another body (the replay cannot find the object; never assume none).
KEY_STILL_MEANS_AN_OBJECT = ("idempotency_key_in_flight", "idempotency_key_reused")
RESEND_PAUSE_SECONDS = 2.0  # between resends of a create while the API is unreachable


# ---- idempotent creates ----------------------------------------------------------------------------


def plan_create_key(ctx: Context, state: Any, plan: Any) -> None:
    """On a create plan, choose the create's Idempotency-Key and keep it in planned private state."""
    if state is None and plan is not None:
        ctx.private.setdefault(IDEMPOTENCY_KEY, new_idempotency_key())


def create_key(ctx: Context) -> str:
    """The planned Idempotency-Key of this create (a fresh one when the plan carried none)."""
    key = ctx.private.get(IDEMPOTENCY_KEY)
    if not isinstance(key, str):
        key = ctx.private[IDEMPOTENCY_KEY] = new_idempotency_key()
    return key


def create_done(ctx: Context) -> None:
    """The create is recorded in state: its key is no longer needed."""
    ctx.private.pop(IDEMPOTENCY_KEY, None)


def outcome_unknown(error: ApiError) -> bool:
    """Whether a failed create may still have happened (no answer, or a 5xx/429 after the retries),
    as opposed to a definite refusal (4xx), or a request that never reached the API (every attempt
    failed to connect), which created nothing."""
    if isinstance(error, TransportError) and not error.may_have_arrived:
        return False
    return error.status == 0 or error.status >= 500 or isinstance(error, RateLimited)


class OutcomeUnknown(Exception):
    """A create that may have happened (see `outcome_unknown`)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(str(error))
        self.error = error


def send_create(
    ctx: Context, send: Callable[[str], ApiResponse], *, resend_until: float | None = None
) -> ApiResponse:
    """Send a create with this create's key. With `resend_until` (a `time.monotonic()` deadline, the
    create timeout of a resource that has one) a create the API could not be reached for is sent again
    with the same key until then, so an API restart mid-apply neither fails the apply nor makes a second
    object. Raises `OutcomeUnknown` when the create may have happened, the `ApiError` when refused."""
    key = create_key(ctx)
    arrived = False  # whether some earlier send may have reached the API
    while True:
        if ctx.cancelled and not arrived:  # Ctrl-C before anything was sent: nothing was made
            raise ClientCancelled(status=0, detail="the create was cancelled before it was sent")
        try:
            return send(key)
        except TransportError as error:
            arrived = arrived or error.may_have_arrived
            if resend_until is None or time.monotonic() >= resend_until:
                if not arrived:
                    raise  # never reached the API: nothing was made
                raise OutcomeUnknown(error) from error
            try:
                ctx.sleep(RESEND_PAUSE_SECONDS)
            except Cancelled:
                if not arrived:
                    raise
                raise OutcomeUnknown(error) from error
        except ApiError as error:
            if outcome_unknown(error):
                raise OutcomeUnknown(error) from error
            raise


def keep_unconfirmed(
    ctx: Context, schema: Schema, plan: Mapping[str, Any], error: ApiError, *, summary: str, subject: str
) -> State:
    """The state of a create whose outcome is unknown, with its error (Terraform taints it): the planned
    values (null where still unknown) and an id naming the create's key."""
    api_error(ctx, summary, error, subject=subject, extra=UNCONFIRMED_CREATE)
    key = ctx.private.pop(IDEMPOTENCY_KEY, None) or new_idempotency_key()
    state = {
        name: None if contains_unknown(plan.get(name)) else plan.get(name) for name in schema.attributes
    }
    for name in schema.blocks:
        state[name] = None if contains_unknown(plan.get(name)) else plan.get(name)
    state["id"] = UNCONFIRMED_ID_PREFIX + key
    return state


def is_unconfirmed(state: Mapping[str, Any]) -> bool:
    object_id = state.get("id")
    return isinstance(object_id, str) and object_id.startswith(UNCONFIRMED_ID_PREFIX)


def id_for_delete(state: Mapping[str, Any], replay: Callable[[str], ApiResponse]) -> str | None:
    """The id to delete. For an unconfirmed create, replay that create with its key (`replay(key)`): the
    API answers the object the first attempt made (or makes it now), whose id is returned. None when the
    API refuses the create outright: then nothing exists to delete."""
    if not is_unconfirmed(state):
        return str(state["id"])
    key = str(state["id"]).removeprefix(UNCONFIRMED_ID_PREFIX)
    try:
        response = replay(key)
    except ApiError as error:
        if outcome_unknown(error) or error.code in KEY_STILL_MEANS_AN_OBJECT:
            raise
        return None
    found = response.body.get("id") if isinstance(response.body, dict) else None
    return found if isinstance(found, str) else None


# ---- ETags -----------------------------------------------------------------------------------------


def remember_etag(ctx: Context, etag: str | None) -> None:
    if etag:
        ctx.private[ETAG_KEY] = etag
    else:
        ctx.private.pop(ETAG_KEY, None)


def etag_of(ctx: Context) -> str | None:
    value = ctx.private.get(ETAG_KEY)
    return value if isinstance(value, str) else None


def own_labels(ctx: Context, configured: Any, answered: Any, *, created: bool) -> Any:
    """The labels as the configuration owns them. A team-scoped API key's objects get the team's label from
    the API when the configuration leaves it out; that label is the key's, not the configuration's, so it is
    remembered (private state) at create and left out of `labels` from then on, unless the configuration
    writes it itself. Without this, a team key's create would end in "inconsistent result after apply"."""
    planned = dict(configured or {})
    labels = dict(answered or {})
    if created:
        added = sorted(key for key in labels if key not in planned)
        if added:
            ctx.private[API_LABELS_KEY] = added
    for key in ctx.private.get(API_LABELS_KEY) or ():
        if key not in planned:
            labels.pop(key, None)
    return labels if labels or configured is not None else None


def object_of(response: ApiResponse, subject: str) -> dict[str, Any]:
    """The JSON object an answer about one object must carry."""
    if not isinstance(response.body, dict):
        raise DiagnosticError("Unexpected API Response", f"The API answered without a {subject} object.")
    return response.body


# ---- the helper ------------------------------------------------------------------------------------


class RestResource(Resource):
    """A resource over one API collection. Subclasses set `subject` ("SSH key"), `title` ("SSH Key", for
    diagnostics), and implement `collection`, `create_body` and `state_from`; `update` calls `patch`."""

    subject: ClassVar[str]
    title: ClassVar[str]
    renames: ClassVar[Mapping[str, str]] = {}  # API field -> attribute, for errors naming a field
    create_verb: ClassVar[str] = "Creating"
    delete_verb: ClassVar[str] = "Deleting"

    # -- what a resource declares ------------------------------------------------------------------

    def collection(self, client: GpuCloudClient) -> Collection:
        raise NotImplementedError

    def create_body(self, values: State) -> dict[str, Any]:
        """The API create body from planned values (also from an unconfirmed state, to replay it)."""
        raise NotImplementedError

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        """The state of an API object; `prior` is the plan or the state it replaces."""
        raise NotImplementedError

    def create_refused(self, ctx: Context, error: ApiError) -> None:
        """A create the API refused (a 4xx): diagnostics. Override to explain a specific code."""
        self.error(ctx, self.create_verb, error, schema=self.schema)

    def delete_refused(self, ctx: Context, error: ApiError) -> None:
        """A delete the API refused (not a 404): diagnostics. Override to explain a specific code."""
        self.error(ctx, self.delete_verb, error)

    # -- the policy ---------------------------------------------------------------------------------

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        plan_create_key(ctx, state, plan)
        return plan

    def create(self, ctx: Context, plan: State) -> State | None:
        collection = self.collection(client_of(ctx))
        body = self.create_body(plan)
        try:
            response = send_create(ctx, lambda key: collection.create(body, idempotency_key=key))
        except OutcomeUnknown as unknown:
            return keep_unconfirmed(ctx, self.schema, plan, unknown.error,
                                    summary=self.summary(self.create_verb), subject=self.subject)
        except ApiError as error:
            self.create_refused(ctx, error)
            return None
        create_done(ctx)
        return self._confirmed(ctx, response, plan, created=True)

    def read(self, ctx: Context, state: State) -> State | None:
        if not configured(ctx) or is_unconfirmed(state):
            return state  # provider block not known yet, or an unconfirmed create: nothing to read
        try:
            response = self.collection(client_of(ctx)).get(str(state["id"]))
        except ApiError as error:
            if error.status == 404:
                return None  # gone: the next plan creates it again
            self.error(ctx, "Reading", error)
            return state
        return self._confirmed(ctx, response, state)

    def patch(self, ctx: Context, plan: State, state: State, changes: Mapping[str, Any]) -> State | None:
        """Send `changes` (PATCH with If-Match); the new state, or None with the error."""
        try:
            response = self.collection(client_of(ctx)).update(
                str(state["id"]), changes, if_match=etag_of(ctx)
            )
        except ApiError as error:
            self.error(ctx, "Updating", error, schema=self.schema)
            return None
        return self._confirmed(ctx, response, plan)

    def delete(self, ctx: Context, state: State) -> None:
        collection = self.collection(client_of(ctx))
        body = self.create_body(state) if is_unconfirmed(state) else {}
        try:
            object_id = id_for_delete(state, lambda key: collection.create(body, idempotency_key=key))
            if object_id is None:
                return  # an unconfirmed create that made nothing
            collection.delete(object_id, if_match=etag_of(ctx))
        except ApiError as error:
            if error.status != 404:  # already gone: the goal of a delete
                self.delete_refused(ctx, error)

    # -- shared pieces -------------------------------------------------------------------------------

    def summary(self, verb: str) -> str:
        return f"Error {verb} {self.title}"

    def error(self, ctx: Context, verb: str, error: ApiError, *, schema: Schema | None = None) -> None:
        api_error(ctx, self.summary(verb), error, subject=self.subject, schema=schema, renames=self.renames)

    def _confirmed(self, ctx: Context, response: ApiResponse, prior: State, *,
                   created: bool = False) -> State:
        remember_etag(ctx, response.etag)
        state = self.state_from(object_of(response, self.subject), prior)
        if "labels" in state:
            labels = own_labels(ctx, prior.get("labels"), state["labels"], created=created)
            state = {**state, "labels": labels}
        result: State = keep_semantic_equals(self.schema, prior, state)
        return result
