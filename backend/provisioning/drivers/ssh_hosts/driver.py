"""The `ssh_hosts` driver: the engine's operations carried out on a host pool's servers over SSH.

A cluster on a pool (`clusters.host_pool_id`) has one server per node, held from admission to release
(`backend.provisioning.pool_hosts`); its first node runs slurmctld and is the login node (no jumphost: every
machine is the user's). `submit` reads what an operation needs from the engine's tables into a plan and
runs it in the background (`drivers/background.py`), like the local driver: each step is idempotent against
the servers (a claim that exists is kept, a daemon that runs is not started again, a released server is
released again as a no-op), so a backend killed at any point converges when asked for the same tokens.

What a node is on a server, and how the server is given back as it was: `host_nodes.py`, `footprint.py`.
Slurm runs without cgroup confinement (proctrack/linuxproc: slurmd is not started by systemd with a
delegated cgroup tree); with accounting (slurmdbd and a MariaDB of the cluster's own on the controller, as on
the local driver) when the controller's server has slurmdbd and MariaDB installed, without it otherwise; its
node lines declare each server's own CPUs and memory and the instance type's GPUs, which the servers' GPU
count and model match (docs/guides/own-hosts.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.domain.host_pools import accounting_ready
from backend.domain.lifecycle import NodeStage
from backend.fabric import slurm
from backend.provisioning import pool_hosts
from backend.provisioning.driver import (
    Capabilities,
    Job,
    LogRequest,
    NodeRun,
    NodeTelemetry,
    Operation,
    OperationRequest,
    OpKind,
    Partition,
    TelemetryTarget,
)
from backend.provisioning.drivers.background import BackgroundOperations, Result
from backend.provisioning.drivers.local import observe
from backend.provisioning.drivers.ssh_hosts import host_nodes
from backend.provisioning.drivers.ssh_hosts.host_nodes import PoolAccess, PoolHost, PoolLogin
from backend.provisioning.node_config import accounting, firewall, slurm_control, slurm_jobs
from backend.provisioning.node_config import configure as node_config
from backend.provisioning.node_config.shell import NodeCommandError, NodeShell
from backend.provisioning.state import live_nodes, security_rules
from backend.provisioning.views import cluster_layout
from backend.store.engine_models import EngineNode
from backend.store.models import Cluster, SshKey

# What a server runs Slurm with: its own GPU device files; no cgroup tree delegated to slurmd (it is not a
# systemd unit), no health check program installed by the check; accounting where the controller's server
# has slurmdbd and MariaDB (`PoolPlan.slurm_host`); systemd or not (`host_nodes.start_slurmd`).
SLURM_HOST = slurm.SlurmHost(
    cgroups=False, shape_from_config=True, health_check_program=None, accounting=False, run_dir="/run/slurm",
    systemd_optional=True,
)
CAPABILITIES = Capabilities(
    orchestrators=("slurm",), telemetry=True, workload=True, logs=True, partitions=True
)
USER = "ubuntu"  # the cluster's user on its servers, as on every gpucloud node
USER_IDS = range(2_000_000, 3_000_000)  # far above a server's own accounts, as the local driver's
VOLUME_ROOT = "/mnt/shared"
WATCH_INTERVAL = dt.timedelta(seconds=5)
REGISTRATION_SECONDS = 120.0
_NO_WORK = (
    OpKind.CONTROL_PLANE_CREATE,
    OpKind.FABRIC_JOIN,
    OpKind.DRIVERS_INSTALL,
    OpKind.CONTAINER_START,
    OpKind.CONTAINER_RECREATE,
)


@dataclass(frozen=True)
class PoolNode:
    name: str
    host: PoolHost
    hostname: str  # the server's own (`hostname -s` from its check): what SlurmctldHost must say
    backend_seen_as: str | None = None  # where the server saw its check come from (`ssh_client_ip`)


@dataclass(frozen=True)
class PoolPlan:
    """What an operation needs, read from the database once, in the engine's transaction."""

    cluster_id: str
    pool_id: str
    login: PoolLogin
    members: tuple[PoolNode, ...]  # the member nodes, by index; the first is the controller
    config: node_config.NodeConfig  # without the munge key (read only to configure a node: `_boot`)
    volume_sources: tuple[str, ...]  # the volumes' directories on the pool's shared storage
    security_rules: dict[str, Any]  # the cluster's security groups' rules
    deleting: bool
    leaving: tuple[PoolNode, ...] = ()  # nodes being released that still hold their server
    gone_clusters: frozenset[str] = frozenset()  # the pool's destroyed clusters (a claim of theirs is stale)
    slurm_qos: tuple[dict[str, Any], ...] = ()  # the QoS the user declares (`slurm_config.qos`)

    def node(self, name: str) -> PoolNode | None:
        return next((n for n in (*self.members, *self.leaving) if n.name == name), None)

    def firewall(self, node: PoolNode) -> str:
        """The server's nftables table: its cluster's servers are peers; the backend's address (as the server
        sees it) may always reach sshd; the rest is the security groups' to decide."""
        peers = "{ " + ", ".join(m.host.address for m in self.members or (node,)) + " }"
        return firewall.ruleset(
            self.security_rules, peers=peers, outsider=None, management=self.management_address(node)
        )

    def management_address(self, node: PoolNode) -> str:
        """Where the backend's connections to the server come from, as the server sees them: this
        machine's address on the route to it, or behind a bastion the bastion's (as the server's check
        saw it, else the bastion's address resolved here)."""
        if self.login.jump is None:
            return source_address(node.host.address)
        if node.backend_seen_as:
            return node.backend_seen_as
        _, bastion, port = self.login.jump
        return str(socket.getaddrinfo(bastion, port, type=socket.SOCK_STREAM)[0][4][0])

    @property
    def controller(self) -> PoolNode | None:
        return self.members[0] if self.members else None


class SshHostsDriver:
    name = "ssh_hosts"
    capabilities = CAPABILITIES

    def __init__(self, root: Path, *, clock: Clock = SYSTEM_CLOCK) -> None:
        # Per cluster: its munge key, and the pool's key with its servers' host keys (0600 in a 0700
        # directory, as the local driver's provisioning key), removed with the cluster.
        self.root = root
        self.clock = clock
        self._operations = BackgroundOperations(clock, "ssh-hosts")

    def wait_idle(self, timeout: float = 60.0) -> bool:
        return self._operations.wait_idle(timeout)

    # The driver interface -------------------------------------------------------------------------

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        job = self._operations.find(request.client_token)
        if job is not None:
            return job.operation(now)
        if request.kind == OpKind.HEALTH_WATCH:
            return Operation(request.client_token, request.kind, now, now + WATCH_INTERVAL, True)
        if request.kind in _NO_WORK:
            return Operation(request.client_token, request.kind, now, now, True)
        assert request.cluster_id is not None
        plan = self.plan(session, request.cluster_id)
        node = self._member(session, plan, request.node_id)
        work = self._work(request.kind, plan, node)
        return self._operations.start(
            request.client_token, request.kind, request.cluster_id, work, now
        ).operation(now)

    def get(self, session: Session, client_token: str) -> Operation | None:
        job = self._operations.find(client_token)
        if job is not None:
            return job.operation(self.clock.now())
        if f"/{OpKind.HEALTH_WATCH}/" in client_token:
            return self._health(session, client_token, self.clock.now())
        return None

    # Day 2: read from the servers at each request ------------------------------------------------

    def nodes_telemetry(
        self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
    ) -> list[NodeTelemetry]:
        shells: list[NodeShell | None] = []
        for target in targets:
            row = session.get(EngineNode, target.instance_id)
            plan = None if row is None else self.plan(session, row.cluster_id)
            node = (
                None
                if plan is None or row is None
                else next((m for m in plan.members if m.name == row.name), None)
            )
            shells.append(None if plan is None or node is None else self._shell(plan, node))
        return observe.read_telemetry(shells, now)

    def cluster_jobs(
        self,
        session: Session,
        cluster_name: str,
        nodes: Sequence[NodeRun],
        now: dt.datetime,
        *,
        cluster_id: str,
    ) -> list[Job]:
        controller = self._controller_shell(session, cluster_id)
        return [] if controller is None else observe.read_jobs(controller)

    def cluster_partitions(
        self, session: Session, cluster_id: str, now: dt.datetime
    ) -> list[Partition] | None:
        controller = self._controller_shell(session, cluster_id)
        return None if controller is None else observe.read_partitions(controller)

    def cluster_logs(self, session: Session, request: LogRequest, now: dt.datetime) -> list[str]:
        plan = self.plan(session, request.cluster_id)
        if request.node is None:
            controller = plan.controller
            return (
                []
                if controller is None
                else observe.controller_log(self._shell(plan, controller), request.tail)
            )
        node = next((m for m in plan.members if m.name == request.node.node_name), None)
        return [] if node is None else observe.node_log(self._shell(plan, node), request.tail)

    # Reading the database -----------------------------------------------------------------------

    def plan(self, session: Session, cluster_id: str) -> PoolPlan:
        # The engine's pass changes nodes without flushing (a node it releases has just lost its name):
        # the layout's Core reads must see what its ORM reads see.
        session.flush()
        cluster = session.get(Cluster, cluster_id)
        pool = None if cluster is None else pool_hosts.pool_of(session, cluster)
        if cluster is None or pool is None:
            raise LookupError(f"cluster {cluster_id} is not on a host pool")
        members: list[PoolNode] = []
        leaving: list[PoolNode] = []
        slurm_host = SLURM_HOST
        bastion_keys: set[str] = set()  # the bastion's key as the held servers' checks recorded it
        for row in sorted(live_nodes(session, cluster_id), key=lambda n: n.index):
            host = pool_hosts.held_host(session, row.id)
            if host is None or host.host_key is None:
                continue
            if not members and row.active_name is not None:  # the controller: accounting where it can
                slurm_host = dataclasses.replace(SLURM_HOST, accounting=accounting_ready(host.inventory))
            inventory = host.inventory or {}
            node = PoolNode(
                row.name,
                PoolHost(row.name, pool_hosts.address_of(host), host.port or pool.ssh_port, host.host_key),
                str(inventory.get("hostname") or row.name),
                inventory.get("ssh_client_ip"),
            )
            bastion_keys.update((host.jump_known_hosts or "").splitlines())
            (members if row.active_name is not None else leaving).append(node)
        layout = cluster_layout(session, cluster_id)
        files: dict[str, str] = {}
        hosts = ""
        if layout is not None and layout.nodes and members:
            hosts = slurm.hosts_file(layout)
            shapes = pool_hosts.node_shapes(session, cluster_id)
            files = {
                "slurm.conf": slurm.slurm_conf(
                    layout,
                    slurm_host,
                    cluster.slurm_config,
                    controller_hostname=members[0].hostname.split(".")[0],
                    shapes=shapes,
                ),
                "gres.conf": slurm.gres_conf(layout, slurm_host, shapes),
                "cgroup.conf": slurm.cgroup_conf(layout, slurm_host),
                "topology.conf": slurm.topology_conf(layout),
            }
        shared = (pool.shared_storage_path or "").rstrip("/")
        volumes = tuple(sorted(link.volume_id for link in cluster.volume_links)) if shared else ()
        sources = tuple(f"{shared}/gpucloud-volumes/{volume}" for volume in volumes)
        keys = tuple(
            key.public_key
            for link in cluster.ssh_key_links
            if (key := session.get(SshKey, link.ssh_key_id)) is not None
        )
        config = node_config.NodeConfig(
            user=USER,
            uid=user_id(cluster_id),
            public_keys=keys,
            hosts=hosts,
            home=None,
            volume_root=VOLUME_ROOT,
            volumes=tuple(
                node_config.Mount(source, f"{VOLUME_ROOT}/{volume}")
                for source, volume in zip(sources, volumes, strict=True)
            ),
            slurm_files=files,
        )
        return PoolPlan(
            cluster_id,
            pool.id,
            PoolLogin(pool.ssh_user, pool.ssh_private_key, pool_hosts.bastion(pool),
                      "".join(f"{line}\n" for line in sorted(bastion_keys) if line)),
            tuple(members),
            config,
            sources,
            security_rules(cluster),
            cluster.deletion_requested_at is not None,
            tuple(leaving),
            pool_hosts.gone_clusters(session, pool.id),
            tuple((cluster.slurm_config or {}).get("qos") or ()),
        )

    def _member(self, session: Session, plan: PoolPlan, node_id: str | None) -> PoolNode | None:
        """The request's node, a member or one being released, while it holds its server."""
        row = None if node_id is None else session.get(EngineNode, node_id)
        return None if row is None else plan.node(row.name)

    def _munge_key(self, cluster_id: str) -> bytes:
        """The cluster's munge key, made once (0600 under the driver's directory)."""
        path = self.root / cluster_id / "munge.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            partial = path.with_suffix(".new")
            partial.touch(mode=0o600)
            partial.write_bytes(secrets.token_bytes(1024))
            partial.rename(path)
        return path.read_bytes()

    def _access(self, plan: PoolPlan) -> PoolAccess:
        hosts = [n.host for n in (*plan.members, *plan.leaving)]
        return PoolAccess(self.root / plan.cluster_id / "ssh", plan.login, hosts)

    def _shell(self, plan: PoolPlan, node: PoolNode) -> NodeShell:
        return self._access(plan).shell(node.host)

    def _controller_shell(self, session: Session, cluster_id: str) -> NodeShell | None:
        plan = self.plan(session, cluster_id)
        return None if plan.controller is None else self._shell(plan, plan.controller)

    # What each operation does, over SSH ---------------------------------------------------------

    def _work(self, kind: OpKind, plan: PoolPlan, node: PoolNode | None) -> Callable[[], Result]:
        def need() -> PoolNode:
            if node is None:
                raise ValueError(f"{kind} needs a node of the cluster")
            return node

        actions: dict[OpKind, Callable[[], None]] = {
            OpKind.CONTROL_PLANE_RELEASE: lambda: self._forget(plan),
            OpKind.NODE_BOOT: lambda: self._boot(plan, need()),
            OpKind.VOLUME_ATTACH: lambda: self._reconfigure(plan, need()),
            OpKind.ORCHESTRATOR_JOIN: lambda: self._join(plan, need()),
            OpKind.ACCEPTANCE: lambda: self._accept(plan, need()),
            OpKind.RECONFIGURE: lambda: self._reconfigure(plan, need()),
            OpKind.NODE_RELEASE: lambda: self._release(plan, need()),
            OpKind.NODE_RESTART: lambda: self._restart(plan, need()),
            OpKind.NODE_POWER_OFF: lambda: self._stop(plan, need(), "paused"),
            OpKind.NODE_POWER_ON: lambda: self._join(plan, need()),
            OpKind.NODE_DRAIN: lambda: self._on_controller(
                plan, lambda c: slurm_control.drain(c, need().name, slurm_control.ACTION_REASON)
            ),
            OpKind.NODE_RESUME: lambda: self._on_controller(
                plan, lambda c: slurm_control.resume(c, need().name)
            ),
            OpKind.NODE_REQUEUE: lambda: self._on_controller(
                plan, lambda c: slurm_jobs.requeue_node_jobs(c, need().name)
            ),
        }
        if kind not in actions:
            raise ValueError(f"the ssh_hosts driver has no operation {kind}")
        action = actions[kind]

        def run() -> Result:
            action()
            booted = kind in (OpKind.NODE_BOOT, OpKind.NODE_RESTART) and node is not None
            return Result(host_key=node.host.host_key if booted and node is not None else None)

        return run

    def _boot(self, plan: PoolPlan, node: PoolNode) -> None:
        """Take the server and configure it as the cluster's node (volume directories first)."""
        shell = self._shell(plan, node)
        if plan.volume_sources:
            shell.run(["install", "-d", "-m", "1777", *plan.volume_sources])
        config = dataclasses.replace(plan.config, munge_key=self._munge_key(plan.cluster_id))
        try:
            host_nodes.join(shell, plan.cluster_id, config, plan.firewall(node))
        except host_nodes.HostTaken as taken:
            if taken.owner not in plan.gone_clusters:
                raise
            # Left claimed by a cluster that is gone (its server did not answer at its release): given
            # back now, then taken.
            host_nodes.release(shell, taken.owner, USER)
            host_nodes.join(shell, plan.cluster_id, config, plan.firewall(node))

    def _join(self, plan: PoolPlan, node: PoolNode) -> None:
        self._sync_controller(plan)
        host_nodes.start_slurmd(self._shell(plan, node), node.name)
        self._on_controller(plan, lambda c: slurm_control.resume_after_repair(c, node.name))

    def _sync_controller(self, plan: PoolPlan) -> None:
        """Every member gets the cluster's files; slurmctld (re)starts on the first when they changed (a new
        node list needs a restart on 22.05), then `scontrol reconfigure` tells the slurmds."""
        controller = plan.controller
        if controller is None or not plan.config.slurm_files:
            return
        for member in plan.members:  # the node list changed: the files, and the peers each firewall lets in
            shell = self._shell(plan, member)
            node_config.write_cluster_files(shell, plan.config)
            firewall.apply(shell, plan.firewall(member))
        shell = self._shell(plan, controller)
        conf = plan.config.slurm_files["slurm.conf"]
        wanted = hashlib.sha256(conf.encode()).hexdigest()
        recorded = self.root / plan.cluster_id / "slurmctld.conf.sha256"
        if node_config.running(shell, "slurmctld") and recorded.exists() and recorded.read_text() == wanted:
            accounting.sync_qos(shell, conf, USER, plan.slurm_qos)
            return
        node_config.stop_daemon(shell, "slurmctld")
        accounting.start_if_kept(shell, conf, SLURM_HOST, USER)  # slurmdbd answers before slurmctld starts
        node_config.start_daemons(shell, ["munged", "slurmctld"])
        deadline = time.monotonic() + 30
        while not node_config.controller_answers(shell)[0]:
            if time.monotonic() > deadline:
                log = shell.run(["tail", "-c", "400", "/var/log/slurm/slurmctld.log"], check=False).stdout
                raise RuntimeError(f"slurmctld on {controller.name} did not answer within 30 s; log: {log}")
            time.sleep(0.2)
        node_config.reconfigure_controller(shell)
        accounting.sync_qos(shell, conf, USER, plan.slurm_qos)
        recorded.write_text(wanted)

    def _accept(self, plan: PoolPlan, node: PoolNode) -> None:
        """slurmd registered under the node's name and takes work."""
        if plan.controller is None:
            return
        controller = self._shell(plan, plan.controller)
        deadline, state = time.monotonic() + REGISTRATION_SECONDS, ""
        while time.monotonic() < deadline:
            state = node_config.slurm_node_state(controller, node.name)
            if state in ("idle", "mixed", "allocated", "completing"):
                return
            time.sleep(0.3)
        log = (
            self._shell(plan, node)
            .run(["tail", "-c", "400", "/var/log/slurm/slurmd.log"], check=False)
            .stdout
        )
        raise RuntimeError(
            f"slurmd on {node.name} ({node.host.address}) did not register within "
            f"{REGISTRATION_SECONDS:.0f} s (state {state!r}); slurmd.log ends: {log or 'empty'}"
        )

    def _reconfigure(self, plan: PoolPlan, node: PoolNode) -> None:
        shell = self._shell(plan, node)
        if plan.volume_sources:
            shell.run(["install", "-d", "-m", "1777", *plan.volume_sources])
        node_config.set_access(shell, plan.config)
        firewall.apply(shell, plan.firewall(node))
        self._sync_controller(plan)

    def _release(self, plan: PoolPlan, node: PoolNode) -> None:
        """Give the server back; a scale-down's remaining nodes learn the new node list."""
        if not plan.deleting:
            self._on_controller(
                plan, lambda c: slurm_control.take_down(c, node.name, "removed from the cluster")
            )
        access = self._access(plan)
        host_nodes.release(access.shell(node.host), plan.cluster_id, USER)
        if plan.deleting:
            access.close()  # the pool's key is not left on disk after the cluster's last operations
            return
        remaining = dataclasses.replace(plan, members=tuple(m for m in plan.members if m.name != node.name))
        self._sync_controller(remaining)

    def _forget(self, plan: PoolPlan) -> None:
        """The cluster is gone (its control plane's release): its munge key and recorded files go too."""
        self._access(plan).close()
        shutil.rmtree(self.root / plan.cluster_id, ignore_errors=True)

    def _restart(self, plan: PoolPlan, node: PoolNode) -> None:
        """A server cannot be replaced: its daemons are started again (its jobs requeued first)."""
        self._stop(plan, node, "restarted")
        self._join(plan, node)
        self._accept(plan, node)

    def _stop(self, plan: PoolPlan, node: PoolNode, why: str) -> None:
        self._on_controller(plan, lambda c: slurm_control.take_down(c, node.name, why))
        node_config.stop_daemons(self._shell(plan, node), ["slurmd"])

    def _on_controller(self, plan: PoolPlan, action: Callable[[NodeShell], object]) -> None:
        """Best effort on slurmctld's server: one that does not answer must not keep a node from going."""
        if plan.controller is None:
            return
        with contextlib.suppress(NodeCommandError, RuntimeError):
            action(self._shell(plan, plan.controller))

    def _health(self, session: Session, token: str, now: dt.datetime) -> Operation:
        """A RUNNING node is healthy while its server answers over SSH and its slurmd runs."""
        row = session.get(EngineNode, token.split("/", 1)[0])
        if row is None or row.stage != NodeStage.READY:
            return Operation(token, OpKind.HEALTH_WATCH, now, now + WATCH_INTERVAL, True)
        plan = self.plan(session, row.cluster_id)
        node = next((m for m in plan.members if m.name == row.name), None)
        if node is None:
            return Operation(token, OpKind.HEALTH_WATCH, now, now + WATCH_INTERVAL, True)
        problem = None
        try:
            health = node_config.read_health(self._shell(plan, node), host_nodes.KERNEL_LOG_COMMAND)
        except NodeCommandError as exc:
            problem = f"the server does not answer over ssh: {exc}"
        else:
            if not health.slurmd_running:
                problem = "slurmd is not running on the server"
            if health.xid_events:
                problem = f"XID {health.xid_events[-1].code}: {health.xid_events[-1].meaning}"
        if problem is None:
            return Operation(token, OpKind.HEALTH_WATCH, now, now + WATCH_INTERVAL, True)
        self._on_controller(plan, lambda c: slurm_control.take_down(c, row.name, problem))
        return Operation(token, OpKind.HEALTH_WATCH, now, now, False, problem)


def user_id(cluster_id: str) -> int:
    """The cluster user's uid (and gid) on every server of the cluster, the same from its id alone."""
    digest = int(hashlib.sha256(cluster_id.encode()).hexdigest()[:12], 16)
    return USER_IDS.start + digest % len(USER_IDS)


def source_address(address: str) -> str:
    """This machine's address on the route to `address` (a UDP socket's choice: nothing is sent)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 22))
        return str(probe.getsockname()[0])

