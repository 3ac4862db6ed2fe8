"""gpucloud_gpu_cluster: a GPU cluster on a fabric, with Slurm or Kubernetes on top.

Plans show defaults, GPU count and the hourly cost from the catalog, and reject at plan time what the
API would reject (with the attribute to blame) and what the region has no capacity for. Applies wait for
RUNNING within `timeouts`; a cluster that fails (a failed node, rolled back) is returned as partial state
with an error so Terraform taints it, and a cluster found FAILED is planned for replacement. A wait that is
interrupted or times out while the cluster is healthy saves it as it is with a warning; the next plan
shows an in-place update (status known after apply) whose apply resumes the wait. A RUNNING cluster with a
node being repaired or left failed (day 2) plans nothing: only a FAILED cluster (every node lost) is replaced.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from provider.client import ApiError, Conflict, GpuCloudClient, NotFound
from provider.cty import UNKNOWN, format_path, is_unknown
from provider.framework import Cancelled, Context, Resource, State, keep_semantic_equals, root, timeout
from provider.resources import cluster_checks as checks
from provider.resources._common import api_error, api_id_identity, client_of, configured
from provider.resources.cluster_checks import known
from provider.resources.cluster_host_pool import (
    check_host_pool,
    check_host_pool_config,
    check_required_without_pool,
)
from provider.resources.cluster_images import (
    changed_images,
    check_needs_slurm,
    credentials_spec,
    failed_imports,
)
from provider.resources.cluster_lifetime import plan_expiry, remember_if_expired, warn_if_recreating_expired
from provider.resources.cluster_plan import (
    keep_planned_elements,
    keep_status_without_engine_work,
    keep_through_scale,
    node_count_moved,
)
from provider.resources.cluster_reservation import warn_if_term_forfeited
from provider.resources.cluster_scale_down import plan_survivors, warn_scale_down
from provider.resources.cluster_wait import (
    ClusterStillConverging,
    ClusterWaitError,
    Poller,
    wait_until_gone,
    wait_until_running,
)
from provider.resources.gpu_cluster_schema import (
    CLUSTER_SCHEMA,
    RUNTIME_ATTRIBUTES,
    cluster_state,
    reservation_state,
    spec_from_plan,
)
from provider.resources.gpu_cluster_slurm import check_slurm_config, slurm_config_spec
from provider.resources.rest import (
    OutcomeUnknown,
    create_done,
    etag_of,
    id_for_delete,
    is_unconfirmed,
    keep_unconfirmed,
    own_labels,
    plan_create_key,
    remember_etag,
    send_create,
)

SUBJECT = "GPU cluster"
CREATE_ERROR = "Error Creating GPU Cluster"
RENAMES = {"volume_ids": "shared_volume_ids"}
DEFAULT_CREATE = dt.timedelta(hours=2)
DEFAULT_UPDATE = dt.timedelta(hours=2)
DEFAULT_DELETE = dt.timedelta(hours=1)
# Changes the API applies as a plain PATCH (Terraform name -> API name).
PATCHABLE = {
    "name": "name",
    "node_count": "node_count",
    "container": "container",
    "ssh_key_ids": "ssh_key_ids",
    "security_group_ids": "security_group_ids",
    "labels": "labels",
    "deletion_protection": "deletion_protection",
    "node_repair": "node_repair",
    "max_hourly_cost_usd": "max_hourly_cost_usd",
    "idle_teardown_minutes": "idle_teardown_minutes",
    "scale_down_grace_minutes": "scale_down_grace_minutes",
    "autoscaling": "autoscaling",
    "reserved_ip_id": "reserved_ip_id",
    "slurm_config": "slurm_config",
    "container_images": "container_images",
    "registry_credentials": "registry_credentials",
}
# Changes the engine has to carry out on the nodes (the update then waits for convergence).
ENGINE_WORK = ("node_count", "container", "ssh_key_ids", "shared_volume_ids", "security_group_ids",
               "slurm_config", "container_images")


SETS = ("ssh_key_ids", "shared_volume_ids", "security_group_ids")
FAILURE_REASON = "failure_reason"  # private state: why the cluster is FAILED, as last read
EMPTY_AS_NULL = ("ssh_key_ids", "shared_volume_ids", "security_group_ids", "labels", "container_images",
                 "registry_credentials")
# A cluster saved while still converging (an interrupted or timed-out wait): the next plan resumes the
# wait as an in-place update, with these attributes known only after it.
CONVERGING_STATUSES = ("PENDING", "PROVISIONING", "CONFIGURING", "CONTAINER_CREATING")
SETTLED_PHASES = (None, "Ready")
# Day-2 phases of a RUNNING cluster: a node repaired in place (node_repair = "auto") or left failed
# (node_repair = "manual") while the others serve. Not a wait to resume, and no reason to replace it.
DAY_TWO_PHASES = ("Repairing", "Degraded")
KNOWN_AFTER_WAIT = ("status", "phase", "nodes", "login", "slurm", "kubernetes", "nccl_env", "reservation",
                    "images", "image_storage_bytes")


def still_converging(state: State) -> bool:
    """Saved before it converged (and healthy): a create or change the engine is still carrying out."""
    status = state.get("status")
    phase = state.get("phase")
    return status in CONVERGING_STATUSES or (
        status == "RUNNING" and phase not in SETTLED_PHASES and phase not in DAY_TWO_PHASES
    )


def _warn_failed_nodes(ctx: Context, state: State) -> None:
    """A RUNNING cluster with failed nodes keeps running: the plan says which and how they come back."""
    failed = [n for n in state.get("nodes") or [] if isinstance(n, dict) and n.get("status") == "FAILED"]
    if not failed or state.get("status") != "RUNNING":
        return
    names = ", ".join(str(n.get("name")) for n in failed)
    how = (
        "The engine repairs it in place (node_repair = \"auto\") unless its replacements for the day "
        "are used up."
        if state.get("node_repair") != "manual"
        else "With node_repair = \"manual\" it stays failed until a node action: POST "
        f"/v1/clusters/{state.get('id')}/nodes/<name>/actions with {{\"action\": \"replace\"}}."
    )
    ctx.warning(
        "Cluster Has Failed Nodes",
        f"Cluster {state.get('id')} is RUNNING with failed nodes ({names}); the other nodes keep serving "
        f"and Terraform does not replace the cluster. {how}",
        root("nodes"),
    )


def _differs(name: str, plan: State, state: State) -> bool:
    """Whether an attribute changed (sets compare unordered; an empty collection equals null)."""
    new, old = plan.get(name), state.get(name)
    if name in EMPTY_AS_NULL:
        new, old = new or None, old or None
    if name in SETS and new is not None and old is not None:
        return set(new) != set(old)
    return bool(new != old)


def _unknown_while_converging(plan: State, state: State | None) -> None:
    """A change to a cluster that is not RUNNING yet: its nodes, login and endpoints are still being set
    up, so they are not kept from the prior state (the term's dates once it started are)."""
    if state is None or state.get("status") == "RUNNING" or not is_unknown(plan.get("status")):
        return  # create, a RUNNING cluster, or nothing changes (status is unknown only in a change)
    for name in RUNTIME_ATTRIBUTES:
        plan[name] = UNKNOWN
    term = state.get("reservation")
    if isinstance(term, dict) and term.get("starts_at"):
        plan["reservation"] = term


def _term_may_start(plan: State) -> None:
    """A reserved term not started yet may start during this apply: its dates are not kept as null."""
    term = plan.get("reservation")
    if is_unknown(plan.get("status")) and isinstance(term, dict) and term.get("starts_at") is None:
        plan["reservation"] = {**term, "starts_at": UNKNOWN, "ends_at": UNKNOWN}


def _keep_planned(new: State, plan: State) -> State:
    """The applied state with the runtime values the plan kept known (an in-place change that cannot alter
    them, whole or a scale's surviving nodes; see `cluster_plan.keep_planned_elements`), and the status a
    change without engine work kept (`cluster_plan.keep_status_without_engine_work`)."""
    for name in ("status", "phase"):
        if isinstance(plan.get(name), str):
            new[name] = plan[name]
    return keep_planned_elements(new, plan, RUNTIME_ATTRIBUTES)


def _report_failed_imports(ctx: Context, body: dict[str, Any], plan: State, state: State,
                           new_state: State) -> State:
    """An update whose new image failed to import: an error on `container_images["<name>"]` with the
    API's reason, and the state keeps the reference still in place for that name (the old one, or none for
    a new name), so the next plan proposes the change again."""
    failed = failed_imports(body, changed_images(plan, state))
    if not failed:
        return new_state
    in_place = dict(new_state.get("container_images") or {})
    before = state.get("container_images") or {}
    for name, reason in failed:
        ctx.error(
            "Container Image Import Failed",
            f"Cluster {state.get('id')} could not import container_images[\"{name}\"] "
            f"({(plan.get('container_images') or {}).get(name)}): {reason}. "
            + (f"/images/{name} keeps the previous image ({before[name]}); " if name in before else
               f"/images/{name} does not exist; ")
            + "fix the reference or the registry_credentials and apply again.",
            root("container_images").element(name),
        )
        if name in before:
            in_place[name] = before[name]
        else:
            in_place.pop(name, None)
    new_state["container_images"] = in_place
    return new_state


def _default_orchestrator(plan: State) -> None:
    """The orchestrator left out: slurm for several nodes, under autoscaling (the autoscaler reads the Slurm
    queue) and on a host pool (its servers run Slurm only; sent explicitly, the API's default being none for
    one node), else none. Left unknown while a single node's `host_pool_id` is."""
    if not is_unknown(plan.get("orchestrator")):
        return
    nodes, pool = plan.get("node_count"), plan.get("host_pool_id")
    if plan.get("autoscaling") is not None or known(pool) or (known(nodes) and int(nodes) > 1):
        plan["orchestrator"] = "slurm"
    elif known(nodes) and not is_unknown(pool):
        plan["orchestrator"] = "none"


def _stopped_waiting(ctx: Context, cluster_id: str, stopped: Exception) -> None:
    """A healthy cluster whose wait was cut short: a warning (an error would taint a new cluster)."""
    why = stopped.message if isinstance(stopped, ClusterWaitError) else "Terraform was interrupted"
    ctx.warning(
        "GPU Cluster Still Converging",
        f"Stopped waiting for cluster {cluster_id} to become RUNNING: {why}. Nothing is wrong with it: it "
        "is saved in state as it is and keeps converging. The next terraform apply resumes the wait (the "
        "plan shows it as an in-place update).",
    )


class GpuClusterResource(Resource):
    type_name = "gpucloud_gpu_cluster"
    import_id_attribute = "id"
    identity_schema = api_id_identity("GPU cluster", "cls")
    schema = CLUSTER_SCHEMA

    # -- plan -----------------------------------------------------------------------------------------

    def validate_config(self, ctx: Context, config: State) -> None:
        checks.check_static_rules(ctx, config, RENAMES)
        check_required_without_pool(ctx, config)
        check_host_pool_config(ctx, config)

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        if plan is None:
            if state is not None:
                warn_if_term_forfeited(ctx, state, "Destroying")
            if state is not None and state.get("deletion_protection") is True:
                ctx.error(
                    "Cluster Is Protected From Deletion",
                    f"Cluster {state.get('id')} has deletion_protection = true. Set it to false and apply "
                    "before destroying or replacing the cluster.",
                    root("deletion_protection"),
                )
            return None
        plan = dict(plan)
        if config is not None:
            checks.check_autoscaling_config(ctx, config)
        plan_create_key(ctx, state, plan)
        if state is not None and state.get("status") == "FAILED":
            plan["status"] = UNKNOWN
            ctx.requires_replace.append(root("status"))
            reason = ctx.private.get(FAILURE_REASON) or f"phase {state.get('phase')}"
            ctx.warning(
                "Failed Cluster Will Be Replaced",
                f"Cluster {state.get('id')} is FAILED ({reason}); Terraform will destroy it and create a "
                "new one.",
                root("status"),
            )
        elif state is not None and plan.get("wait_for_running") is not False and still_converging(state):
            plan.update(dict.fromkeys(KNOWN_AFTER_WAIT, UNKNOWN))  # the update resumes the wait
        if state is not None:
            _warn_failed_nodes(ctx, state)
        if ctx.requires_replace and state is not None:
            warn_if_term_forfeited(ctx, state, "Replacing")
        if ctx.requires_replace and state is not None and state.get("deletion_protection") is True:
            changed = ", ".join(sorted({format_path(p) for p in ctx.requires_replace}))
            ctx.error(
                "Cluster Is Protected From Deletion",
                f"Changing {changed} replaces cluster {state.get('id')}, which has deletion_protection = "
                "true. Set it to false and apply first, or keep the current value.",
                root("deletion_protection"),
            )
        _unknown_while_converging(plan, state)
        node_count_moved(plan, state)
        keep_through_scale(plan, state, _differs)
        if state is not None:
            keep_status_without_engine_work(
                plan, state, any(_differs(n, plan, state) for n in (*ENGINE_WORK, "reserved_ip_id", "name"))
            )
        _term_may_start(plan)
        _default_orchestrator(plan)
        nodes = plan.get("node_count")
        if config is not None:  # with the orchestrator's default (slurm for several nodes, else none)
            check_slurm_config(ctx, config, plan.get("orchestrator"))
            check_needs_slurm(ctx, config, plan.get("orchestrator"))
        if plan.get("orchestrator") == "none" and known(nodes) and int(nodes) > 1:
            ctx.error(
                "Orchestrator Required",
                f"This cluster runs without an orchestrator, so it cannot have {nodes} nodes. Set "
                "orchestrator = \"slurm\" or \"kubernetes\" (this replaces the cluster) or keep one node.",
                root("node_count"),
            )
        plan_expiry(ctx, plan, state, config)
        if state is None:
            warn_if_recreating_expired(ctx, plan)
        if not configured(ctx):
            return plan
        plan_survivors(plan, state, warn_scale_down(ctx, client_of(ctx), plan, state))
        try:
            catalog = checks.catalog_of(client_of(ctx))
        except ApiError as error:
            ctx.warning(
                "Cluster Checks Skipped",
                f"The catalog could not be read ({error}); region, capacity and cost are checked at apply.",
            )
            return plan
        self._plan_with_catalog(ctx, catalog, plan, state, config)
        return plan

    def _plan_with_catalog(
        self, ctx: Context, catalog: checks.Catalog, plan: State, state: State | None, config: State | None
    ) -> None:
        itype = plan.get("instance_type")
        shape = catalog.instance_types.get(itype) if known(itype) else None
        if is_unknown(plan.get("interconnect")) and (shape is not None or known(plan.get("host_pool_id"))):
            # The API's default: the type's fabric, or Ethernet for a host pool's servers (whatever their
            # type, which a pool's cluster may leave to the API).
            on_pool = plan.get("host_pool_id") is not None
            plan["interconnect"] = "ethernet" if on_pool else catalog.default_interconnect(str(itype))
        checks.check_catalog_rules(ctx, catalog, plan)
        if ctx.diagnostics.has_errors:
            return
        creating = state is None
        prior_nodes = None if creating or state is None else state.get("node_count")
        # A reservation holds its capacity; a host pool's servers are the pool's, not the region's.
        drawn = plan.get("reservation_id") is not None or plan.get("host_pool_id") is not None
        if not drawn and (creating or (known(plan.get("node_count")) and plan["node_count"] != prior_nodes)):
            checks.check_capacity(ctx, catalog, plan, prior_nodes)
        checks.check_autoscaling_capacity(ctx, catalog, plan, creating)
        cost = checks.estimate(catalog, plan)
        checks.check_cost_ceiling(ctx, plan, cost, state, catalog)
        if not ctx.diagnostics.has_errors:
            checks.check_plan_quota(ctx, client_of(ctx), catalog, plan, state, cost)
        if shape is not None and known(plan.get("node_count")) and is_unknown(plan.get("num_gpus")):
            plan["num_gpus"] = int(shape["gpu_count"]) * int(plan["node_count"])
        if shape is not None and is_unknown(plan.get("gpu_type")):
            plan["gpu_type"] = shape["gpu_model"]
        if cost is not None and is_unknown(plan.get("estimated_hourly_cost_usd")):
            plan["estimated_hourly_cost_usd"] = cost.hourly_usd
        if cost is not None and is_unknown(plan.get("reservation")):
            # The up-front charge shows in the plan; the term's dates once the cluster first runs.
            plan["reservation"] = None if cost.upfront_usd is None else {
                "starts_at": UNKNOWN, "ends_at": UNKNOWN, "upfront_cost_usd": cost.upfront_usd
            }
        self._check_references(ctx, plan, state, config)

    def _check_references(
        self, ctx: Context, plan: State, state: State | None, config: State | None
    ) -> None:
        """Keys and volumes named by known ids must exist; volumes must be in the cluster's region.
        Warnings (`reference_problem`): they must not block `terraform destroy`. The pool read plans the
        region a cluster on it leaves out."""
        client = client_of(ctx)
        checks.check_reservation(ctx, client, plan, state)
        check_host_pool(ctx, client, plan, state, config)
        for attr, getter, kind in (
            ("ssh_key_ids", client.get_ssh_key, "SSH key"),
            ("shared_volume_ids", client.get_volume, "shared volume"),
        ):
            ids = plan.get(attr)
            before = set((state or {}).get(attr) or [])
            if not known(ids):
                continue
            for ref in sorted(i for i in ids if known(i) and i not in before):
                try:
                    found = getter(ref)
                except NotFound:
                    ctx.reference_problem(
                        f"Unknown {kind.title()}", f"No {kind} with id \"{ref}\" in this project.", root(attr)
                    )
                    continue
                except ApiError:
                    continue  # checked again by the API at apply
                region = plan.get("region")
                if attr == "shared_volume_ids" and known(region) and found.get("region") != region:
                    ctx.reference_problem(
                        "Volume In Another Region",
                        f"Shared volume {ref} is in {found.get('region')}, the cluster in {region}; "
                        "a cluster can only mount volumes of its own region.",
                        root(attr),
                    )
        self._check_reserved_ip(ctx, plan, state)

    @staticmethod
    def _check_reserved_ip(ctx: Context, plan: State, state: State | None) -> None:
        """A newly named reserved IP must exist and be in the cluster's region (a warning at plan, as for
        keys and volumes)."""
        ref, region = plan.get("reserved_ip_id"), plan.get("region")
        if not known(ref) or ref is None or ref == (state or {}).get("reserved_ip_id"):
            return
        try:
            found = client_of(ctx).get_reserved_ip(ref)
        except NotFound:
            ctx.reference_problem("Unknown Reserved IP", f"No reserved IP with id \"{ref}\" in this project.",
                                  root("reserved_ip_id"))
            return
        except ApiError:
            return  # checked again by the API at apply
        if known(region) and found.get("region") != region:
            ctx.reference_problem(
                "Reserved IP In Another Region",
                f"Reserved IP {ref} ({found.get('address')}) is in {found.get('region')}, the cluster in "
                f"{region}; reserve an IP in {region}.",
                root("reserved_ip_id"),
            )

    # -- apply ----------------------------------------------------------------------------------------

    def create(self, ctx: Context, plan: State) -> State | None:
        client = client_of(ctx)
        limit = timeout(plan, "create", DEFAULT_CREATE).total_seconds()
        deadline = time.monotonic() + limit
        try:
            body = self._send_create(ctx, client, plan, deadline)
        except OutcomeUnknown as unknown:
            return keep_unconfirmed(
                ctx, self.schema, plan, unknown.error, summary=CREATE_ERROR, subject=SUBJECT
            )
        if body is None:
            return None
        state = self._state(ctx, client, body, plan, created=True)
        if plan.get("wait_for_running") is False:
            create_done(ctx)
            return state
        poller = Poller(client, body["id"], deadline, ctx.sleep)
        try:
            body = wait_until_running(poller, day_two_ok=True)
        except (ClusterStillConverging, Cancelled) as stopped:
            create_done(ctx)  # in state from now on: the next apply resumes the wait, never re-creates
            _stopped_waiting(ctx, body["id"], stopped)
            return self._state(ctx, client, poller.last or body, plan, created=True)
        except ClusterWaitError as error:
            ctx.error(
                "Error Creating GPU Cluster",
                f"Cluster {body['id']} did not become RUNNING: {error.message}. It is saved in state as "
                "tainted; the next apply replaces it.",
            )
            return self._state(ctx, client, poller.last or body, plan, created=True)
        create_done(ctx)
        remember_etag(ctx, poller.etag)  # the first refresh then finds nothing new
        state = self._state(ctx, client, body, plan, created=True)
        _warn_failed_nodes(ctx, state)  # came up, then lost a node it keeps failed: created all the same
        return state

    def _send_create(
        self, ctx: Context, client: GpuCloudClient, plan: State, deadline: float
    ) -> dict[str, Any] | None:
        """POST the cluster with the create's key (the one create policy, `rest.send_create`), sending it
        again while the API is unreachable until the create timeout: a backend restart mid-apply neither
        fails the apply nor creates a second cluster. None when the API refused it."""
        spec = spec_from_plan(plan)
        try:
            response = send_create(
                ctx, lambda key: client.clusters.create(spec, idempotency_key=key), resend_until=deadline
            )
        except ApiError as error:  # refused (`OutcomeUnknown` is the caller's)
            api_error(ctx, CREATE_ERROR, error, subject=SUBJECT, schema=self.schema, renames=RENAMES)
            return None
        if not isinstance(response.body, dict):
            ctx.error("Unexpected API Response", "The API answered without a cluster object.")
            return None
        return response.body

    def read(self, ctx: Context, state: State) -> State | None:
        if is_unconfirmed(state):
            return state  # an unconfirmed create: the replacing apply finds and deletes it
        try:
            response = client_of(ctx).clusters.get(state["id"])
        except ApiError as error:
            if isinstance(error, NotFound) or error.status == 410:
                remember_if_expired(state)  # deleted at its expiry: the create's plan says so
                return None
            api_error(ctx, "Error Reading GPU Cluster", error, subject=SUBJECT)
            return state
        remember_etag(ctx, response.etag)
        body = response.body if isinstance(response.body, dict) else None
        if body is None or body.get("deletion_requested_at") is not None:
            remember_if_expired(state)
            return None  # gone (or being deleted outside Terraform): the next plan re-creates it
        if body.get("status") == "FAILED" and body.get("status_reason"):
            ctx.private[FAILURE_REASON] = body["status_reason"]  # for the plan's explanation
        else:
            ctx.private.pop(FAILURE_REASON, None)
        return self._state(ctx, client_of(ctx), body, state)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        client = client_of(ctx)
        deadline = time.monotonic() + timeout(plan, "update", DEFAULT_UPDATE).total_seconds()
        cluster_id = state["id"]
        changes = {
            api: plan.get(name) for name, api in PATCHABLE.items() if _differs(name, plan, state)
        }
        if plan.get("autoscaling") is not None:
            changes.pop("node_count", None)  # the engine's (the API moves it into a new range itself)
        for listed in ("ssh_key_ids", "security_group_ids"):
            if listed in changes:
                changes[listed] = sorted(changes[listed] or [])
        if "labels" in changes:
            changes["labels"] = changes["labels"] or {}
        if "container_images" in changes:
            changes["container_images"] = changes["container_images"] or {}
        if "registry_credentials" in changes:  # the whole map: the API replaces it
            changes["registry_credentials"] = credentials_spec(changes["registry_credentials"])
        before = set(state.get("shared_volume_ids") or [])
        after = set(plan.get("shared_volume_ids") or [])
        if "slurm_config" in changes:
            changes["slurm_config"] = slurm_config_spec(changes["slurm_config"])
            if before != after:  # a prolog may be on a volume attached by this apply: one PATCH for both
                changes["volume_ids"] = sorted(after)
                before = after
        if _differs("ttl", plan, state) or _differs("expires_at", plan, state):
            # A ttl sets expires_at (from created_at); null in both clears the expiry.
            changes.update({"ttl": plan["ttl"]} if plan.get("ttl") is not None
                           else {"expires_at": plan.get("expires_at")})
        if (plan.get("billing") or {}).get("on_expiry") != (state.get("billing") or {}).get("on_expiry"):
            changes["billing"] = {"on_expiry": plan["billing"]["on_expiry"]}
        body: dict[str, Any] | None = None
        try:
            if changes:
                response = client.clusters.update(cluster_id, changes, if_match=etag_of(ctx))
                remember_etag(ctx, response.etag)
                body = response.body
            for volume_id in sorted(before - after):
                body = client.detach_volume(cluster_id, volume_id)
            for volume_id in sorted(after - before):
                body = client.attach_volume(cluster_id, volume_id)
        except ApiError as error:
            api_error(ctx, "Error Updating GPU Cluster", error, subject=SUBJECT, schema=self.schema,
                      renames=RENAMES)
            return self._refreshed_or(ctx, client, cluster_id, state)
        body = body or client.get_cluster(cluster_id)
        engine_work = any(_differs(n, plan, state) for n in ENGINE_WORK)
        if (engine_work or still_converging(state)) and plan.get("wait_for_running") is not False:
            poller = Poller(client, cluster_id, deadline, ctx.sleep)
            try:
                if engine_work:
                    body = wait_until_running(poller, changed_at=body.get("updated_at"), changed=body)
                else:  # resuming a wait an earlier apply stopped
                    body = wait_until_running(poller)
            except (ClusterStillConverging, Cancelled) as stopped:
                _stopped_waiting(ctx, cluster_id, stopped)
                # Saved with a warning, so Terraform holds it to the plan: the kept nodes and login as planned
                # (a scale's leaving nodes still listed show at the next refresh).
                state_now = self._state(ctx, client, poller.last or body, plan)
                return keep_planned_elements(state_now, plan, RUNTIME_ATTRIBUTES)
            except ClusterWaitError as error:
                ctx.error("Error Updating GPU Cluster", f"Cluster {cluster_id} did not converge after the "
                          f"change: {error.message}. A cluster left FAILED is replaced by the next apply.")
                return self._state(ctx, client, poller.last or body, plan)
            remember_etag(ctx, poller.etag)
        new_state = _keep_planned(self._state(ctx, client, body, plan), plan)
        return _report_failed_imports(ctx, body, plan, state, new_state)

    def _refreshed_or(self, ctx: Context, client: GpuCloudClient, cluster_id: str, state: State) -> State:
        """After a failed update: the cluster as it is now (so partial changes are recorded)."""
        try:
            return self._state(ctx, client, client.get_cluster(cluster_id), state)
        except ApiError:
            return state

    def delete(self, ctx: Context, state: State) -> None:
        client = client_of(ctx)
        deadline = time.monotonic() + timeout(state, "delete", DEFAULT_DELETE).total_seconds()
        try:
            spec = spec_from_plan(state)
            cluster_id = id_for_delete(state, lambda key: client.clusters.create(spec, idempotency_key=key))
            if cluster_id is None:
                return  # an unconfirmed create that made nothing
            client.delete_cluster(cluster_id)
        except NotFound:
            return
        except Conflict as error:
            api_error(ctx, "Error Deleting GPU Cluster", error, subject=SUBJECT, schema=self.schema)
            return
        except ApiError as error:
            api_error(ctx, "Error Deleting GPU Cluster", error, subject=SUBJECT)
            return
        try:
            wait_until_gone(Poller(client, cluster_id, deadline, ctx.sleep))
        except ClusterWaitError as error:
            ctx.error(
                "Error Deleting GPU Cluster", f"Cluster {cluster_id} was not deleted: {error.message}."
            )

    # -- state ----------------------------------------------------------------------------------------

    def state_from_api(self, ctx: Context, body: dict[str, Any]) -> State:
        """The state of an API object as an import reads it (`terraform query` builds states with it)."""
        return self._state(ctx, client_of(ctx), body, {})

    def _state(self, ctx: Context, client: GpuCloudClient, body: dict[str, Any], prior: State, *,
               created: bool = False) -> State:
        read = cluster_state(body, prior, self._reservation(client, body))
        read["labels"] = own_labels(ctx, prior.get("labels"), read["labels"], created=created)
        state: State = keep_semantic_equals(self.schema, prior, read)
        return state

    @staticmethod
    def _reservation(client: GpuCloudClient, body: dict[str, Any]) -> dict[str, Any] | None:
        """The reserved term as billed, or before the cluster first ran the catalog's up-front estimate."""
        if (body.get("billing") or {}).get("type") != "reserved" or body.get("reservation"):
            return reservation_state(body, None)
        try:
            cost = checks.estimate(checks.catalog_of(client), body)
        except ApiError:
            cost = None
        return reservation_state(body, cost.upfront_usd if cost is not None else None)
