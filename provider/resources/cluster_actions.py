"""Actions (Terraform 1.14+) on a running cluster's nodes, on the API's node actions:

- `gpucloud_cluster_node_action`: restart, replace, drain or resume one node
  (POST /v1/clusters/{id}/nodes/{name}/actions);
- `gpucloud_cluster_restart_workers`: restart every worker reporting XID errors
  (POST /v1/clusters/{id}/actions).

Invoked with `terraform apply -invoke=action.<type>.<name>` or from a resource's `action_trigger`. Restart
and replace then wait, reporting each change of the node's status, until it is RUNNING again (on its new
machine after a replace); drain and resume take effect in the engine at once. Each action is audited by
the API as `cluster.node_<action>` / `cluster.restart_workers`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping
from typing import Any

from provider.client import (
    ApiError,
    GpuCloudClient,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
    new_idempotency_key,
)
from provider.framework import (
    Action,
    BoolAttribute,
    Context,
    DiagnosticError,
    Schema,
    State,
    StringAttribute,
    parse_duration,
    root,
)
from provider.framework.validators import custom, string_matches
from provider.resources._common import api_error, client_of, configured
from provider.resources.api_rules import field_validators
from provider.resources.gpu_cluster_schema import REF_ID_PATTERN

TRANSIENT = (TransportError, ServerError, RateLimited)
WAITING_ACTIONS = ("restart", "replace")
DEFAULT_TIMEOUT = "30m"
FIRST_POLL_SECONDS = 0.5
MAX_POLL_SECONDS = 5.0


def _valid_duration(value: str) -> bool:
    try:
        return parse_duration(value) > dt.timedelta(0)
    except ValueError:
        return False


def _cluster_id() -> StringAttribute:
    return StringAttribute(
        required=True,
        description="Id of the cluster (e.g. `gpucloud_gpu_cluster.train.id`).",
        validators=[string_matches(REF_ID_PATTERN, "must be a cluster id such as cls_abc123")],
    )


def _wait(description: str) -> BoolAttribute:
    return BoolAttribute(optional=True, description=f"{description} Default: `true`.")


TIMEOUT = StringAttribute(
    optional=True,
    description=f'How long to wait, a duration such as "30m" (units s, m, h). Default: `{DEFAULT_TIMEOUT}`.',
    validators=[custom('must be a positive duration such as "30m" or "1h30m"', _valid_duration)],
)


def _node_line(node: Mapping[str, Any]) -> str:
    """What a user wants to see of a node while waiting: status (and why), pending action, machine."""
    line = f"{node['name']} is {node['status']}"
    if node.get("status_reason"):
        line += f" ({node['status_reason']})"
    if node.get("pending_action"):
        line += f", {node['pending_action']} pending"
    return f"{line}, machine {node['instance_id']}"


class NodeWaiter:
    """Polls a cluster's nodes until each named node is back RUNNING, yielding a progress line whenever
    one changes. Rides out transient API failures until the deadline; `ctx.sleep` ends it on Ctrl-C."""

    def __init__(self, ctx: Context, client: GpuCloudClient, cluster_id: str, timeout: dt.timedelta) -> None:
        self.ctx = ctx
        self.client = client
        self.cluster_id = cluster_id
        self.deadline = time.monotonic() + timeout.total_seconds()
        self.timeout = timeout

    def until_running(
        self, names: Mapping[str, str | None], seen: Mapping[str, Mapping[str, Any]] | None = None
    ) -> Iterator[str]:
        """`names`: node -> the machine it must leave (replace) or None (restart: the same machine);
        `seen`: nodes as already reported (not repeated while unchanged)."""
        shown = {name: _node_line(node) for name, node in (seen or {}).items()}
        pause = FIRST_POLL_SECONDS
        waiting = dict(names)
        while waiting:
            nodes = self._nodes()
            for name, old_machine in list(waiting.items()):
                node = nodes.get(name)
                line = _node_line(node) if node is not None else f"{name} is being replaced"
                if shown.get(name) != line:
                    shown[name] = line
                    yield line
                if node is not None and self._done(node, old_machine):
                    del waiting[name]
            if waiting:
                if time.monotonic() + pause > self.deadline:
                    raise DiagnosticError(
                        "Timed Out Waiting for Node",
                        f"{', '.join(waiting)} of cluster {self.cluster_id} not RUNNING after {self.timeout} "
                        "(the action was accepted and goes on). Raise timeout, or check the node with "
                        f"`gpucloud nodes {self.cluster_id}`.",
                        root("timeout"),
                    )
                self.ctx.sleep(pause)
                pause = min(pause * 2, MAX_POLL_SECONDS)

    def _nodes(self) -> dict[str, dict[str, Any]]:
        try:
            listing = self.client.list_cluster_nodes(self.cluster_id)
        except TRANSIENT:
            return {}  # the next poll asks again
        return {n["name"]: n for n in listing["items"]}

    def _done(self, node: Mapping[str, Any], old_machine: str | None) -> bool:
        if node.get("pending_action"):
            return False  # the engine has not started on it yet
        status = node["status"]
        if status == "FAILED":
            raise DiagnosticError(
                "Node Failed",
                f"{node['name']} of cluster {self.cluster_id} failed: "
                f"{node.get('status_reason') or 'no reason given'}. "
                f"Replace it (action = \"replace\") or look at `gpucloud nodes {self.cluster_id}`.",
            )
        if status != "RUNNING":
            return False
        if old_machine is not None and node["instance_id"] == old_machine:
            raise DiagnosticError(
                "Node Not Replaced",
                f"{node['name']} of cluster {self.cluster_id} is still on machine {old_machine}: "
                f"{node.get('status_reason') or 'the engine kept it'}.",
            )
        return True


def _settings(config: State) -> tuple[bool, dt.timedelta]:
    wait = config.get("wait")
    timeout = config.get("timeout") or DEFAULT_TIMEOUT
    return wait is not False, parse_duration(timeout)


class ClusterNodeAction(Action):
    type_name = "gpucloud_cluster_node_action"
    schema = Schema(
        description="Restart, replace, drain or resume one node of a running GPU cluster (admin API key). "
        "`restart` reboots the node in place and `replace` moves it to a new machine under the same "
        "hostname and address (jobs on it are killed; local disks are lost on replace); both wait until the "
        "node is RUNNING again, reporting its status as it changes. `drain` lets no new job land on the "
        "node (running jobs finish) and `resume` undoes it.",
        attributes={
            "cluster_id": _cluster_id(),
            "node": StringAttribute(required=True, description="The node's hostname, e.g. `train-1`."),
            "action": StringAttribute(
                required=True,
                description="`restart`, `replace`, `drain` or `resume`.",
                validators=field_validators("NodeActionIn", "action"),
            ),
            "wait": _wait("Wait until the node is RUNNING again (restart and replace; drain and resume "
                          "take effect at once)."),
            "timeout": TIMEOUT,
        },
    )

    def plan(self, ctx: Context, config: State) -> None:
        _check_cluster(ctx, config)

    def invoke(self, ctx: Context, config: State) -> Iterator[str]:
        client = client_of(ctx)
        cluster_id, name, action = config["cluster_id"], config["node"], config["action"]
        wait, timeout = _settings(config)
        old_machine = None
        if action == "replace":
            old_machine = _machine_of(ctx, client, cluster_id, name)
            if ctx.diagnostics.has_errors:
                return
        try:
            done = client.node_action(cluster_id, name, action, idempotency_key=new_idempotency_key())
        except ApiError as error:
            api_error(ctx, f"Error Running Node Action {action!r}", error, subject="GPU cluster node")
            return
        yield f"{action} of {name} accepted; {_node_line(done['node'])}"
        if wait and action in WAITING_ACTIONS:
            waiter = NodeWaiter(ctx, client, cluster_id, timeout)
            yield from waiter.until_running({name: old_machine}, seen={name: done["node"]})
            yield f"{name} is RUNNING again"


class ClusterRestartWorkers(Action):
    type_name = "gpucloud_cluster_restart_workers"
    schema = Schema(
        description="Restart every worker of a running GPU cluster that reports XID errors (failed by a "
        "hardware fault, or with a hardware XID in the last hour), admin API key; then wait until they are "
        "RUNNING again. Does nothing when no worker reports one.",
        attributes={
            "cluster_id": _cluster_id(),
            "wait": _wait("Wait until the restarted workers are RUNNING again."),
            "timeout": TIMEOUT,
        },
    )

    def plan(self, ctx: Context, config: State) -> None:
        _check_cluster(ctx, config)

    def invoke(self, ctx: Context, config: State) -> Iterator[str]:
        client = client_of(ctx)
        cluster_id = config["cluster_id"]
        wait, timeout = _settings(config)
        try:
            done = client.cluster_action(cluster_id, "restart_workers", idempotency_key=new_idempotency_key())
        except ApiError as error:
            api_error(ctx, "Error Restarting Workers", error, subject="GPU cluster")
            return
        names: list[str] = done["nodes"]
        if not names:
            yield f"no worker of {cluster_id} reports XID errors: nothing to restart"
            return
        yield f"restarting {', '.join(names)}"
        if wait:
            yield from NodeWaiter(ctx, client, cluster_id, timeout).until_running(dict.fromkeys(names))
            yield f"{', '.join(names)} RUNNING again"


def _check_cluster(ctx: Context, config: State) -> None:
    """At plan time: the cluster exists (skipped while its id is unknown or the provider unconfigured)."""
    cluster_id = config.get("cluster_id")
    if not isinstance(cluster_id, str) or not configured(ctx):
        return
    try:
        client_of(ctx).get_cluster(cluster_id)
    except NotFound:
        ctx.error("Cluster Not Found", f'No cluster with id "{cluster_id}" exists.', root("cluster_id"))
    except ApiError as error:
        api_error(ctx, "Error Reading GPU Cluster", error, subject="GPU cluster")


def _machine_of(ctx: Context, client: GpuCloudClient, cluster_id: str, name: str) -> str | None:
    """The machine a node is on now (None when the cluster has no such node: the API then says so)."""
    try:
        nodes = client.list_cluster_nodes(cluster_id)["items"]
    except ApiError as error:
        api_error(ctx, "Error Reading Cluster Nodes", error, subject="GPU cluster")
        return None
    return next((n["instance_id"] for n in nodes if n["name"] == name), None)
