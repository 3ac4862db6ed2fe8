"""The `local` driver: the engine's operations carried out on namespace nodes of this machine.

`submit` reads what an operation needs from the engine's tables in the caller's session (the cluster's
subnet, members and addresses, its SSH keys and volumes, the generated Slurm files) into a plain plan,
and runs the plan in a background thread: the engine's transaction never waits for a daemon. Until the
thread is done the operation answers "not ready, look again in a moment"; the engine polls `submit` with
the same client token and gets the outcome.

Nothing but that in-memory table of running and finished operations is kept, and it need not be: every
step is idempotent against the system (a namespace that exists is not made again, a daemon that runs is
not started again, a node that is gone is not removed again). A backend killed at any point is asked
for the same tokens after its restart and repeats the steps, which converge on what the database says.
The health watch is derived from the system too: a RUNNING node whose slurmd no longer runs has failed.
Day-2 reads (jobs, partitions, logs, node agent readings; `observe.py`) are taken from the nodes at each
request, never cached.

Operations of one cluster run one at a time (they share its files and controller); clusters run in
parallel. One engine worker process drives the local driver (the one `serve` embeds).

Boot is the host's (namespaces, cabling, the node's sshd: `namespaces.py`, `node_setup.py`); everything
after it goes over SSH to the node as root (`backend.provisioning.node_config`): users, keys, mounts, munge,
Slurm files and daemons, `scontrol`, health checks and the node agent, as a driver for servers of
one's own would do it with the same code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import shutil
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.domain.lifecycle import NodeStage
from backend.fabric import slurm
from backend.provisioning import cluster_images, images, power_saving
from backend.provisioning.driver import (
    ImageOutcome,
    Job,
    LogRequest,
    NodeRun,
    NodeTelemetry,
    Operation,
    OperationRequest,
    OpKind,
    Partition,
    PowerRequests,
    TelemetryTarget,
)
from backend.provisioning.drivers.background import BackgroundJob, BackgroundOperations, Result
from backend.provisioning.drivers.local import CAPABILITIES, observe, preflight
from backend.provisioning.drivers.local.namespaces import LocalCluster, LocalHostError, LocalNode
from backend.provisioning.drivers.local.node_setup import (
    EXPORTS,
    KERNEL_LOG_COMMAND,
    LOCAL_SLURM_HOST,
    SSH_USER,
    cluster_id_map,
    cluster_uid,
    control_dir,
    munge_key,
    node_binds,
    node_shell,
    prepare_cluster,
    published_host_key,
    start_sshd,
    volumes_dir,
)
from backend.provisioning.images import RegistryCredentials
from backend.provisioning.node_config import accounting, firewall, slurm_control, slurm_jobs
from backend.provisioning.node_config import configure as node_config
from backend.provisioning.node_config.shell import NodeCommandError, NodeFile, NodeShell
from backend.provisioning.node_config.ssh import SshShell, close_all
from backend.provisioning.state import live_nodes, security_rules
from backend.provisioning.views import cluster_layout
from backend.store.engine_models import EngineCluster, EngineNode
from backend.store.models import Cluster, SshKey

WATCH_INTERVAL = dt.timedelta(seconds=1)  # how often a RUNNING node's health is read
REGISTRATION_SECONDS = 120.0
VOLUME_ROOT = "/mnt/shared"  # where the API says a volume is mounted (`mount_path`)
ORCHESTRATORS = ("slurm", "none")  # no Kubernetes control plane is packaged for this machine
_NO_WORK = (OpKind.FABRIC_JOIN, OpKind.DRIVERS_INSTALL, OpKind.CONTAINER_START)
_WORK = (OpKind.CONTROL_PLANE_CREATE, OpKind.CONTROL_PLANE_RELEASE, OpKind.NODE_BOOT, OpKind.VOLUME_ATTACH,
         OpKind.ORCHESTRATOR_JOIN, OpKind.ACCEPTANCE, OpKind.RECONFIGURE, OpKind.NODE_RELEASE,
         OpKind.NODE_POWER_OFF, OpKind.NODE_POWER_ON, OpKind.NODE_RESTART, OpKind.NODE_DRAIN,
         OpKind.NODE_RESUME, OpKind.NODE_REQUEUE, OpKind.IMAGES_IMPORT, OpKind.CONTAINER_RECREATE)
# The operations that bring a machine up: they report its SSH host key (the cluster's, see node_setup).
_BOOTS = (OpKind.NODE_BOOT, OpKind.CONTROL_PLANE_CREATE, OpKind.NODE_POWER_ON, OpKind.NODE_RESTART)


class UnsupportedHost(RuntimeError):
    """The machine cannot run the local driver; the message says what is missing and how to fix it."""


@dataclass(frozen=True)
class NodePlan:
    name: str
    instance: str
    address: str
    reason: str | None = None  # the engine's reason for the node's current status (why it is released)


@dataclass(frozen=True)
class ClusterPlan:
    """Everything an operation needs, read from the database once, in the engine's transaction."""

    cluster_id: str
    subnet: str
    orchestrator: str
    multi_node: bool
    controller: NodePlan | None  # slurmctld's node: the jumphost, or the single node
    slurm_files: dict[str, str]
    hosts: str
    public_keys: tuple[str, ...]
    volumes: dict[str, Path]  # mount path -> host directory
    deleting: bool
    members: tuple[NodePlan, ...] = ()
    # The security group rules every node enforces ({"ingress": [...], "egress": [...]}).
    security_rules: dict[str, Any] = field(default_factory=dict)
    # The QoS the user declares (`slurm_config.qos`), made in slurmdbd by sacctmgr.
    slurm_qos: tuple[dict[str, Any], ...] = ()
    # An elastic cluster's power saving (names up to max_nodes, CLOUD where no machine is), or None.
    power: slurm.PowerSaving | None = None
    # A single-node cluster with a `container`: its user's sessions run inside it.
    login_container: bool = False


class LocalDriver:
    name = "local"
    capabilities = CAPABILITIES

    def __init__(self, root: Path, *, check_host: bool = True, clock: Clock = SYSTEM_CLOCK,
                 registries: images.TransportPolicy | None = None) -> None:
        self.root = root
        self.clock = clock
        # How image imports reach registries: HTTPS against the system's CAs and an operator's CA directory.
        self.registries = registries or images.TransportPolicy()
        if check_host:
            problems = preflight.host_problems(preflight.address_ranges())
            if problems:
                raise UnsupportedHost(f"GPUCLOUD_DRIVER=local cannot run here: {preflight.report(problems)}")
        self._operations = BackgroundOperations(clock, "local")

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait for the operations running in the background; False if some still run at the timeout."""
        return self._operations.wait_idle(timeout)

    # The driver interface -------------------------------------------------------------------------

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        job = self._operations.find(request.client_token)
        if job is None:
            if request.kind == OpKind.HEALTH_WATCH:
                return Operation(request.client_token, request.kind, now, now + WATCH_INTERVAL, True)
            if request.kind in _NO_WORK:
                return Operation(request.client_token, request.kind, now, now, True)
            if request.kind not in _WORK:  # an operation kind newer than this driver: say so, fail it
                return Operation(request.client_token, request.kind, now, now, False,
                                 f"the local driver does not implement {request.kind}")
            job = self._start(session, request, now)
        return job.operation(now)

    def get(self, session: Session, client_token: str) -> Operation | None:
        now = self.clock.now()
        job = self._operations.find(client_token)
        if job is not None:
            return job.operation(now)
        if f"/{OpKind.HEALTH_WATCH}/" in client_token:
            return self._health(session, client_token, now)
        return None

    # Day 2: what the nodes report (the optional telemetry, workload and log capabilities) -----------

    def nodes_telemetry(self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
                        ) -> list[NodeTelemetry]:
        """The node agent's reading of each node, run inside it (no GPU here: none reported, and why), with
        Slurm's state of the node (one `scontrol show node` per cluster)."""
        machines = [self._machine(session, t.instance_id) for t in targets]
        shells = [None if m is None or not m.exists() else shell_of(m) for m in machines]
        readings = observe.read_telemetry(shells, now)
        states: dict[str, dict[str, str]] = {}
        answered = []
        for target, reading in zip(targets, readings, strict=True):
            row = session.get(EngineNode, target.instance_id)
            cluster = None if row is None else session.get(Cluster, row.cluster_id)
            if row is None or cluster is None or cluster.orchestrator != "slurm":
                answered.append(reading)
                continue
            if row.cluster_id not in states:
                controller = self._controller(session, row.cluster_id)
                states[row.cluster_id] = observe.read_node_states(shell_of(controller)) if (
                    controller is not None and controller.exists()) else {}
            state = states[row.cluster_id].get(row.name)
            answered.append(dataclasses.replace(reading, orchestrator_state=state))
        return answered

    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: dt.datetime,
                     *, cluster_id: str) -> list[Job]:
        """Slurm's own job table: `squeue --json` on the controller plus its jobcomp file."""
        controller = self._controller(session, cluster_id)
        if controller is None or not controller.exists():
            return []
        return observe.read_jobs(shell_of(controller))

    def cluster_partitions(self, session: Session, cluster_id: str, now: dt.datetime
                           ) -> list[Partition] | None:
        """Slurm's partitions (`scontrol show partition`), GPUs counted from its nodes' Gres and GresUsed."""
        controller = self._controller(session, cluster_id)
        if controller is None or not controller.exists():
            return None
        return observe.read_partitions(shell_of(controller))

    def cluster_logs(self, session: Session, request: LogRequest, now: dt.datetime) -> list[str]:
        """slurmctld's log file (controller), or the node's slurmd log with its kernel log's XID lines."""
        if request.node is None:
            controller = self._controller(session, request.cluster_id)
            return [] if controller is None or not controller.exists() else observe.controller_log(
                shell_of(controller), request.tail)
        node = self._machine(session, request.node.instance_id)
        return [] if node is None or not node.exists() else observe.node_log(shell_of(node), request.tail)

    def power_requests(self, session: Session, cluster_id: str, members: Sequence[str]
                       ) -> PowerRequests | None:
        """Slurm's power-saving requests (the request file its ResumeProgram and SuspendProgram append
        to on the controller), read over the controller's root shell; those `members` satisfy are
        dropped from the file (backend.provisioning.power_saving)."""
        cluster = session.get(Cluster, cluster_id)
        state = session.get(EngineCluster, cluster_id)
        if cluster is None or state is None or cluster.autoscaling_max_nodes is None:
            return None
        if power_saving.for_cluster(cluster, state, members) is None:
            return None
        controller = self._controller(session, cluster_id)
        if controller is None or not controller.exists():
            return None
        shell = shell_of(controller)
        try:
            text = shell.run_script(power_saving.READ_SCRIPT, what="read Slurm's power requests").stdout
            pending, done = power_saving.settle(power_saving.parse(text), members,
                                                power_saving.names(state.hostname_prefix,
                                                                   cluster.autoscaling_max_nodes))
            if done:
                shell.run_script(power_saving.prune_script(len(text.splitlines()), done),
                                 what="acknowledge Slurm's power requests")
        except (LocalHostError, NodeCommandError):
            return None  # the controller does not answer now: the next round asks again
        return pending

    def _machine(self, session: Session, node_id: str) -> LocalNode | None:
        """The namespace node behind an engine node (its current instance)."""
        row = session.get(EngineNode, node_id)
        state = None if row is None else session.get(EngineCluster, row.cluster_id)
        if row is None or state is None:
            return None
        return self.cluster(row.cluster_id, state.subnet).node(row.name, row.private_ip, instance_name(row))

    def _controller(self, session: Session, cluster_id: str) -> LocalNode | None:
        state = session.get(EngineCluster, cluster_id)
        if state is None:
            return None
        controller = controller_plan(state, [n for n in live_nodes(session, cluster_id)
                                             if n.active_name is not None])
        if controller is None:
            return None
        return self.cluster(cluster_id, state.subnet).node(controller.name, controller.address,
                                                           controller.instance)

    # Reading the database -----------------------------------------------------------------------

    def cluster(self, cluster_id: str, subnet: str) -> LocalCluster:
        return LocalCluster(self.root, cluster_id, subnet)

    def volume_dir(self, volume_id: str) -> Path:
        return volumes_dir(self.root) / volume_id

    def delete_volume_data(self, volume_id: str) -> None:
        """A deleted volume's data goes with it (the API deletes only volumes attached to no live cluster;
        a node still holding its mount until its detach is carried out sees an empty directory)."""
        directory = self.volume_dir(volume_id)
        if directory.parent == volumes_dir(self.root):  # an id, never a path of its own
            shutil.rmtree(directory, ignore_errors=True)

    def plan(self, session: Session, cluster_id: str) -> ClusterPlan:
        cluster = session.get(Cluster, cluster_id)
        state = session.get(EngineCluster, cluster_id)
        if cluster is None or state is None:
            raise LookupError(f"cluster {cluster_id} has no engine state")
        layout = cluster_layout(session, cluster_id)
        members = [n for n in live_nodes(session, cluster_id) if n.active_name is not None]
        controller = controller_plan(state, members)
        files: dict[str, str] = {}
        hosts = ""
        power = None
        if layout is not None:
            # The names the node lines declare (the layout's members), never another view of them: a name
            # both a member and CLOUD is a duplicate slurmctld refuses to start with.
            power = power_saving.for_cluster(cluster, state, [n.name for n in layout.nodes])
            hosts = slurm.hosts_file(layout)
            if cluster.orchestrator == "slurm" and layout.nodes:
                files = {"slurm.conf": slurm.slurm_conf(layout, LOCAL_SLURM_HOST, cluster.slurm_config,
                                                        power=power),
                         "gres.conf": slurm.gres_conf(layout, LOCAL_SLURM_HOST),
                         "cgroup.conf": slurm.cgroup_conf(layout, LOCAL_SLURM_HOST),
                         "topology.conf": slurm.topology_conf(layout, power.cloud_nodes if power else ())}
        keys = tuple(key.public_key for link in cluster.ssh_key_links
                     if (key := session.get(SshKey, link.ssh_key_id)) is not None)
        volumes = {f"{VOLUME_ROOT}/{link.volume_id}": self.volume_dir(link.volume_id)
                   for link in cluster.volume_links}
        return ClusterPlan(cluster.id, state.subnet, cluster.orchestrator, state.jumphost_ip is not None,
                           controller, files, hosts, keys, volumes,
                           cluster.deletion_requested_at is not None or state.rollback_reason is not None,
                           tuple(NodePlan(n.name, instance_name(n), n.private_ip) for n in members),
                           security_rules(cluster),
                           tuple((cluster.slurm_config or {}).get("qos") or ()), power=power,
                           login_container=cluster.container is not None and state.jumphost_ip is None)

    def _start(self, session: Session, request: OperationRequest, now: dt.datetime) -> BackgroundJob:
        cluster_id = request.cluster_id
        if cluster_id is None:
            raise ValueError(f"operation {request.client_token}: the local driver needs the cluster id")
        plan = self.plan(session, cluster_id)
        node = None
        if request.node_id is not None:
            row = session.get(EngineNode, request.node_id)
            if row is None:
                raise LookupError(f"node {request.node_id} does not exist")
            node = NodePlan(row.name, instance_name(row), row.private_ip, row.status_reason)
        credentials = {}
        if request.kind == OpKind.IMAGES_IMPORT:  # the only operation that opens the sealed credentials
            cluster_row = session.get(Cluster, cluster_id)
            credentials = cluster_images.registry_credentials(cluster_row) if cluster_row else {}
        work = self._work(request.kind, plan, node, request.images, credentials)
        return self._operations.start(request.client_token, request.kind, cluster_id, work, now)

    def _health(self, session: Session, token: str, now: dt.datetime) -> Operation:
        """A RUNNING node is healthy while its namespace exists and (Slurm) its slurmd runs."""
        row = session.get(EngineNode, token.split("/", 1)[0])
        if row is None or row.stage != NodeStage.READY:
            return Operation(token, OpKind.HEALTH_WATCH, now, now + WATCH_INTERVAL, True)
        cluster = session.get(Cluster, row.cluster_id)
        state = session.get(EngineCluster, row.cluster_id)
        assert cluster is not None and state is not None
        node = self.cluster(cluster.id, state.subnet).node(row.name, row.private_ip, instance_name(row))
        problem = None
        if not node.exists():
            problem = "the node's namespaces are gone (host rebooted or removed by hand)"
        else:  # read from the node over SSH, as from any server
            try:
                health = node_config.read_health(shell_of(node), KERNEL_LOG_COMMAND)
            except NodeCommandError as exc:
                problem = f"the node does not answer over ssh: {exc}"
            else:
                if cluster.orchestrator == "slurm" and not health.slurmd_running:
                    problem = "slurmd is not running (node crashed)"
                if health.xid_events:
                    problem = f"XID {health.xid_events[-1].code}: {health.xid_events[-1].meaning}"
        if problem is None:
            return Operation(token, OpKind.HEALTH_WATCH, now, now + WATCH_INTERVAL, True)
        if cluster.orchestrator == "slurm":
            # Found broken: its jobs end in Slurm now (requeued or NODE_FAIL), whatever comes next (a
            # repair, a restart, or a node left failed under node_repair = manual).
            controller = self._controller(session, cluster.id)
            if controller is not None and controller.exists():
                with contextlib.suppress(LocalHostError, NodeCommandError):
                    slurm_control.take_down(shell_of(controller), row.name, problem)
        return Operation(token, OpKind.HEALTH_WATCH, now, now, False, problem)

    # What each operation does: boot on the host, the rest over SSH -------------------------------

    def _work(self, kind: OpKind, plan: ClusterPlan, node: NodePlan | None,
              wanted_images: tuple[tuple[str, str], ...] = (),
              credentials: Mapping[str, RegistryCredentials] | None = None) -> Callable[[], Result]:
        """The operation's work, run in a thread; a boot's result is the host key the machine presents, an
        image import's the outcome of each image."""
        cluster = self.cluster(plan.cluster_id, plan.subnet)
        if kind == OpKind.IMAGES_IMPORT:
            return lambda: Result(images=self._import_images(cluster, wanted_images, credentials or {}))
        local = cluster.node(node.name, node.address, node.instance) if node is not None else None
        actions: dict[OpKind, Callable[[], None]] = {
            OpKind.CONTROL_PLANE_CREATE: lambda: self._create_control_plane(cluster, plan),
            OpKind.CONTROL_PLANE_RELEASE: lambda: tear_down(cluster),
            OpKind.NODE_BOOT: lambda: self._boot(cluster, plan, _need(local)),
            OpKind.VOLUME_ATTACH: lambda: self._sync_volumes(cluster, plan, _need(local)),
            OpKind.ORCHESTRATOR_JOIN: lambda: self._join(cluster, plan, _need(local)),
            OpKind.ACCEPTANCE: lambda: self._accept(cluster, plan, _need(local)),
            OpKind.RECONFIGURE: lambda: self._reconfigure(cluster, plan, _need(local)),
            # A single-node container set or cleared: whether logins run in it (the image itself is
            # switched by the cluster's import).
            OpKind.CONTAINER_RECREATE: lambda: self._sync_volumes(cluster, plan, _need(local)),
            OpKind.NODE_RELEASE: lambda: self._release(cluster, plan, _need(local),
                                                       node.reason if node is not None else None),
            OpKind.NODE_POWER_OFF: lambda: self._power_off(cluster, plan, _need(local),
                                                           node.reason if node is not None else None),
            OpKind.NODE_POWER_ON: lambda: self._power_on(cluster, plan, _need(local)),
            OpKind.NODE_RESTART: lambda: self._restart(cluster, plan, _need(local),
                                                       node.reason if node is not None else None),
            OpKind.NODE_DRAIN: lambda: self._drain(cluster, plan, _need(local), slurm_control.ACTION_REASON),
            OpKind.NODE_RESUME: lambda: self._resume(cluster, plan, _need(local)),
            OpKind.NODE_REQUEUE: lambda: self._requeue(cluster, plan, _need(local)),
        }
        if kind not in actions:
            raise ValueError(f"the local driver has no operation {kind}")
        action = actions[kind]

        def run() -> Result:
            action()
            return Result(host_key=published_host_key(cluster) if kind in _BOOTS else None)

        return run

    def _import_images(self, cluster: LocalCluster, wanted: tuple[tuple[str, str], ...],
                       credentials: Mapping[str, RegistryCredentials]) -> tuple[ImageOutcome, ...]:
        """Pull the cluster's images once into its store on the host, which every node shows read-only at
        /images (a registry on the host's loopback is reached by the host, not by the nodes)."""
        cluster.up()
        return images.sync_store(cluster.images_store, wanted, credentials, policy=self.registries)

    def _lay_out(self, cluster: LocalCluster, plan: ClusterPlan) -> None:
        """The host's share of a cluster: bridge, boot files and secrets, volume directories."""
        route = preflight.conflicting_route(plan.subnet, own_bridge=cluster.bridge)
        if route is not None:
            raise LocalHostError(f"cluster subnet {plan.subnet} overlaps the host route `{route}`: "
                                 "set GPUCLOUD_LOCAL_ADDRESS_RANGE to a free block, or remove that route")
        cluster.up()
        for directory in plan.volumes.values():
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o1777)  # every cluster's ubuntu user has its own uid
        cluster.export_volumes(plan.volumes.values())
        prepare_cluster(cluster, cluster_id_map(cluster))

    def _node_config(self, cluster: LocalCluster, plan: ClusterPlan) -> node_config.NodeConfig:
        """What every node of the cluster is configured with: the host's storage, exported to each node
        at boot, is what a node mounts its home and volumes from (bind mounts)."""
        return node_config.NodeConfig(
            user=SSH_USER, uid=cluster_uid(cluster), public_keys=plan.public_keys, hosts=plan.hosts,
            home=node_config.Mount(f"{EXPORTS}/home", "/home"), volume_root=VOLUME_ROOT,
            volumes=tuple(node_config.Mount(f"{EXPORTS}/volumes/{source.name}", target)
                          for target, source in sorted(plan.volumes.items())),
            munge_key=munge_key(cluster) if plan.orchestrator == "slurm" else None,
            slurm_files=plan.slurm_files, login_container=plan.login_container, sudo=True)

    def _boot(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        """Boot the node (namespaces, its sshd), then configure it over SSH."""
        self._lay_out(cluster, plan)
        if not node.exists():  # made (again) from scratch: a connection to a sshd gone before is stale
            shell_of(node).close()
        node.create(node_binds(node), id_map=cluster_id_map(cluster))
        start_sshd(node)
        _wait_for_port(node.address, 22, cluster.management)
        node_config.configure(shell_of(node), self._node_config(cluster, plan))
        node.load_firewall(self._firewall(cluster, plan))

    def _create_control_plane(self, cluster: LocalCluster, plan: ClusterPlan) -> None:
        if not plan.multi_node or plan.controller is None:
            return
        self._boot(cluster, plan, self._node(cluster, plan.controller))
        if plan.orchestrator == "slurm":
            self._stop_controllers_on_nodes(cluster, plan)
            self._sync_controller(cluster, plan)

    def _stop_controllers_on_nodes(self, cluster: LocalCluster, plan: ClusterPlan) -> None:
        """A single node grown into a cluster ran slurmctld itself: stop it there (its slurmd learns of
        the jumphost's controller from the `scontrol reconfigure` that follows)."""
        for member in plan.members:
            node = self._node(cluster, member)
            if node.exists():
                node_config.stop_daemons(shell_of(node), ["slurmctld", "slurmdbd", "mariadbd"])

    def _join(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        if plan.orchestrator != "slurm":
            return
        self._lay_out(cluster, plan)
        self._sync_controller(cluster, plan)
        if plan.power is None:
            node_config.start_daemons(shell_of(node), ["munged", "slurmd"])
        else:
            # slurmctld takes a resumed node's registration only with a boot time after its resume
            # request; a namespace node shares the host's kernel (and uptime): `-b` reports a boot.
            node_config.start_daemons(shell_of(node), ["munged"])
            shell_of(node).run_script(node_config.OWN + node_config.start_command("slurmd", "-b"),
                                      what="start slurmd")
        controller = self._slurm_controller(cluster, plan)
        if controller is not None:  # a repair drained the name in Slurm: its new machine takes work
            slurm_control.resume_after_repair(controller, node.name)

    def _slurm_controller(self, cluster: LocalCluster, plan: ClusterPlan) -> SshShell | None:
        if plan.orchestrator != "slurm" or plan.controller is None:
            return None
        controller = cluster.node(plan.controller.name, plan.controller.address, plan.controller.instance)
        return shell_of(controller) if controller.exists() else None

    def _take_down(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode, why: str, *,
                   machine_replaced: bool = False) -> None:
        """Slurm DOWN (and DRAIN) for `node` before its machine stops: its jobs are requeued or failed now,
        not left RUNNING until slurmctld misses the dead slurmd (`SlurmdTimeout`, minutes). Best effort:
        a controller that does not answer must not keep a broken machine alive."""
        controller = self._slurm_controller(cluster, plan)
        if controller is None:
            return
        with contextlib.suppress(LocalHostError, NodeCommandError):
            slurm_control.take_down(controller, node.name, why, machine_replaced=machine_replaced)

    def _drain(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode, reason: str) -> None:
        controller = self._slurm_controller(cluster, plan)
        if controller is not None:
            slurm_control.drain(controller, node.name, reason)

    def _resume(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        controller = self._slurm_controller(cluster, plan)
        if controller is not None:
            slurm_control.resume(controller, node.name)

    def _requeue(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        """A scale-down's grace is over: Slurm takes the node's jobs back (requeued, never killed)."""
        controller = self._slurm_controller(cluster, plan)
        if controller is not None:
            slurm_jobs.requeue_node_jobs(controller, node.name)

    def _power_off(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode, why: str | None) -> None:
        """A credit pause shuts the machine down, its disk kept. Slurm is told first (DOWN with the pause's
        reason, as before a restart): its batch jobs are requeued (`JobRequeue=1`) and the others end
        NODE_FAIL naming it, instead of staying RUNNING until slurmctld misses the slurmd. Power-on
        resumes the node when it joins (`_join`)."""
        if plan.controller is not None and plan.controller.name == node.name:
            # The node is its own controller (a single-node cluster): no slurmctld would be left to act on
            # a DOWN, it stops with the machine (its state saved) and meets the node again at power-on.
            _stop_machine(node)
            return
        reason = f"powered off ({why or 'paused'})"
        self._take_down(cluster, plan, node, reason)
        _stop_machine(node)
        # Again once it is off: its slurmd, still alive after the first, re-registered (IDLE+DRAIN); so the
        # node reads DOWN while the machine is off, not IDLE+DRAIN until slurmctld's SlurmdTimeout.
        self._take_down(cluster, plan, node, reason)

    def _power_on(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        """Powered off, a node keeps its namespaces and files (its disk): boot it and start its daemons."""
        self._boot(cluster, plan, node)
        self._join(cluster, plan, node)
        self._accept(cluster, plan, node)

    def _restart(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode, why: str | None) -> None:
        self._take_down(cluster, plan, node, why or "restarted")  # resumed when it joins again
        _stop_machine(node)
        self._power_on(cluster, plan, node)

    def _accept(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        """The real check: the node's slurmd registered and is usable; ssh answers on the login node."""
        if not node.exists():
            raise LocalHostError(f"node {node.name} does not exist")
        if not plan.multi_node:
            _wait_for_port(node.address, 22, cluster.management)
        if plan.orchestrator != "slurm" or plan.controller is None:
            return
        controller = shell_of(self._node(cluster, plan.controller))
        deadline = time.monotonic() + REGISTRATION_SECONDS
        state = ""
        while time.monotonic() < deadline:
            state = node_config.slurm_node_state(controller, node.name)
            # Registered (no `*`: slurmctld hears from it). Drained by someone's choice (the drain node
            # action, an operator: kept across a restart) counts; by Slurm itself (a shape it refuses),
            # or still gpucloud's repair drain, it does not.
            if state in ("idle", "mixed", "allocated", "completing") or (
                    state in ("drained", "draining") and _chosen_drain(controller, node.name)):
                return
            time.sleep(0.3)
        log = shell_of(node).run(["tail", "-c", "400", "/var/log/slurm/slurmd.log"], check=False).stdout
        raise LocalHostError(f"slurmd on {node.name} did not register within {REGISTRATION_SECONDS:.0f} s "
                             f"(state {state!r}); slurmd.log ends: {log or 'no slurmd log'}")

    def _reconfigure(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        self._sync_volumes(cluster, plan, node)
        script = self._firewall(cluster, plan)
        for target in self._with_login(cluster, plan, node):
            target.load_firewall(script)
        if plan.orchestrator == "slurm" and plan.slurm_files and plan.controller is not None:
            # The user's partitions, prolog/epilog (slurm.conf) and QoS: slurm.conf as slurmctld has it
            # already (every node's reconfigure but the first, a volume or key change) needs the QoS only.
            recorded = cluster.dir / "slurmctld.conf.sha256"
            wanted = hashlib.sha256(plan.slurm_files["slurm.conf"].encode()).hexdigest()
            controller = self._node(cluster, plan.controller)
            if recorded.exists() and recorded.read_text() == wanted and controller.exists():
                self._sync_qos(plan, shell_of(controller))
            else:
                self._sync_controller(cluster, plan)

    @staticmethod
    def _firewall(cluster: LocalCluster, plan: ClusterPlan) -> str:
        """The nodes' nftables ruleset: the cluster's subnet but the host's address is the cluster (always
        allowed), the rest is the security groups' to decide."""
        return firewall.ruleset(plan.security_rules, peers=str(cluster.subnet), outsider=cluster.gateway,
                                management=cluster.management)

    def _with_login(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> list[LocalNode]:
        """The node, and the jumphost (the login node) of a multi-node cluster, those that exist."""
        targets = [node]
        if plan.multi_node and plan.controller is not None:
            targets.append(self._node(cluster, plan.controller))
        return [target for target in targets if target.exists()]

    def _sync_volumes(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode) -> None:
        """Keys and volumes in place, on this node and the jumphost (the login node of the cluster)."""
        self._lay_out(cluster, plan)
        config = self._node_config(cluster, plan)
        for target in self._with_login(cluster, plan, node):
            node_config.set_access(shell_of(target), config)

    def _release(self, cluster: LocalCluster, plan: ClusterPlan, node: LocalNode,
                 why: str | None = None) -> None:
        if not plan.deleting and any(m.name == node.name for m in plan.members):
            # Replaced in place: its jobs end in Slurm (requeued or NODE_FAIL) before the machine goes;
            # the name stays down and drained until the new machine joins and resumes it.
            self._take_down(cluster, plan, node, why or "replaced", machine_replaced=True)
        elif not plan.deleting and plan.power is not None:
            self._power_down(cluster, plan, node.name)
        shell_of(node).close()
        node.destroy()
        if plan.deleting:  # the whole cluster goes: no reconfiguration for the nodes that remain
            if not plan.multi_node and not cluster.node_names():
                tear_down(cluster)  # a single-node cluster has no control plane whose release would do it
            return
        if plan.orchestrator == "slurm" and plan.slurm_files and cluster.dir.exists():
            self._sync_controller(cluster, plan)

    def _sync_controller(self, cluster: LocalCluster, plan: ClusterPlan) -> None:
        """Give every node the cluster's files (hosts, Slurm's), then bring slurmctld to them, keeping
        running jobs: when the node list changed, restart slurmctld, then `scontrol reconfigure` (22.05
        dies when reconfigured with another node count); new slurmds start only after this."""
        if plan.controller is None or not plan.slurm_files:
            return
        controller = self._node(cluster, plan.controller)
        if not controller.exists():
            return
        nodes = {member.instance: self._node(cluster, member) for member in plan.members}
        nodes[plan.controller.instance] = controller
        config = self._node_config(cluster, plan)
        for node in nodes.values():
            if node.exists():
                node_config.write_cluster_files(shell_of(node), config)
        shell = shell_of(controller)
        self._prepare_power(plan, shell)
        conf = plan.slurm_files["slurm.conf"]
        wanted = hashlib.sha256(conf.encode()).hexdigest()
        # The lines only a restart applies; the user's partitions, prolog and epilog reconfigure in place.
        fixed = hashlib.sha256(slurm.restart_part(conf).encode()).hexdigest()
        recorded_file = cluster.dir / "slurmctld.conf.sha256"
        fixed_file = cluster.dir / "slurmctld.fixed.sha256"
        recorded = recorded_file.read_text() if recorded_file.exists() else ""
        running = node_config.running(shell, "slurmctld")
        if recorded == wanted and running:
            self._sync_qos(plan, shell)
            return
        if running and recorded and fixed_file.exists() and fixed_file.read_text() == fixed:
            node_config.reconfigure_controller(shell)  # same nodes: slurmctld keeps running (22.05)
        else:
            node_config.stop_daemon(shell, "slurmctld")
            accounting.start_if_kept(shell, conf, LOCAL_SLURM_HOST, SSH_USER)  # slurmdbd before slurmctld
            node_config.start_daemons(shell, ["munged", "slurmctld"])
            _wait_for_controller(shell)
            node_config.reconfigure_controller(shell)
        recorded_file.write_text(wanted)
        fixed_file.write_text(fixed)
        self._sync_qos(plan, shell)

    @staticmethod
    def _sync_qos(plan: ClusterPlan, controller: NodeShell) -> None:
        accounting.sync_qos(controller, plan.slurm_files["slurm.conf"], SSH_USER, plan.slurm_qos)

    @staticmethod
    def _prepare_power(plan: ClusterPlan, controller: NodeShell) -> None:
        """An elastic cluster's ResumeProgram and SuspendProgram, and their request directory (slurm's
        only), on the controller (files skipped when already there)."""
        if plan.power is None:
            return
        controller.write_files([
            NodeFile(power_saving.RESUME_PROGRAM, power_saving.program("resume").encode(), 0o755),
            NodeFile(power_saving.SUSPEND_PROGRAM, power_saving.program("suspend").encode(), 0o755)])
        controller.run_script(power_saving.prepare_script(), what="prepare Slurm's power requests")

    def _power_down(self, cluster: LocalCluster, plan: ClusterPlan, name: str) -> None:
        """A member the engine released stays declared (CLOUD): Slurm is told it is powered down, so that
        it is idle (powered down) and can be resumed again, not DOWN for a slurmd that stopped
        answering. Best effort."""
        controller = self._slurm_controller(cluster, plan)
        if controller is not None:
            with contextlib.suppress(LocalHostError, NodeCommandError):
                controller.run(["scontrol", "update", f"NodeName={name}", "State=POWER_DOWN_FORCE"],
                               check=False)

    @staticmethod
    def _node(cluster: LocalCluster, plan: NodePlan) -> LocalNode:
        return cluster.node(plan.name, plan.address, plan.instance)


def local_root(data_dir: Path) -> Path:
    """Where the local driver keeps its derived state: namespace files, cluster files, volumes."""
    return data_dir.expanduser() / "local"


def controller_plan(state: EngineCluster, members: Sequence[EngineNode]) -> NodePlan | None:
    """slurmctld's node: the jumphost of a multi-node cluster, else the first member node."""
    if state.jumphost_ip is not None:
        return NodePlan(f"{state.hostname_prefix}-jumphost", f"{state.hostname_prefix}-jumphost",
                        state.jumphost_ip)
    if members:
        first = min(members, key=lambda n: n.index)
        return NodePlan(first.name, instance_name(first), first.private_ip)
    return None


def instance_name(node: EngineNode) -> str:
    """The namespace identity of one machine behind a node name (replacements are new instances)."""
    return f"{node.name}.{node.attempt}"


def _chosen_drain(controller: NodeShell, node: str) -> bool:
    found = slurm_control.slurm_node(controller, node)
    return found is not None and found.chosen_drain


def _need(node: LocalNode | None) -> LocalNode:
    if node is None:
        raise ValueError("this operation needs a node")
    return node


def shell_of(node: LocalNode) -> SshShell:
    """A root shell on a local node, over SSH."""
    return node_shell(node.cluster, node.name, node.address)


def _stop_machine(node: LocalNode) -> None:
    """The machine off: its processes end, its namespaces and files (its disk) stay."""
    shell_of(node).close()
    node.stop_processes()


def tear_down(cluster: LocalCluster) -> None:
    """Everything of the cluster, its SSH connection masters first."""
    close_all(control_dir(cluster))
    cluster.down()


def _wait_for_controller(shell: NodeShell, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    output = ""
    while time.monotonic() < deadline:
        up, output = node_config.controller_answers(shell)
        if up:
            return
        time.sleep(0.2)
    log = shell.run(["tail", "-c", "400", "/var/log/slurm/slurmctld.log"], check=False).stdout
    raise LocalHostError(f"slurmctld did not answer within {seconds:.0f} s ({output}); log: {log or 'none'}")


def _wait_for_port(address: str, port: int, source: str, seconds: float = 30.0) -> None:
    """Wait for `address:port` to accept a connection from `source` (the management address: a security
    group may refuse the host's own)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1, source_address=(source, 0)):
                return
        except OSError:
            time.sleep(0.1)
    raise LocalHostError(f"nothing answers on {address}:{port} after {seconds:.0f} s")
