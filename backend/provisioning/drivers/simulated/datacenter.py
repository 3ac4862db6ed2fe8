"""The modelled datacenter: phase durations from the reference table, seeded faults, idempotent ops.

Durations are the reference's typical time plus a tail towards its p95, divided by the speed factor.
Outcomes come from a hash of (seed, cluster name, node name, operation, attempt), so the same scenario
under the same seed fails the same nodes at the same steps; the operations themselves are recorded in
`sim_operations`, keyed by client token, exactly as a hardware API would keep them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning import cluster_images, spot
from backend.provisioning.driver import (
    Job,
    LogRequest,
    NodeRun,
    NodeTelemetry,
    Operation,
    OperationRequest,
    OpKind,
    TelemetryTarget,
)
from backend.provisioning.drivers.simulated import CAPABILITIES, logs, registry, slurm, telemetry, workload
from backend.provisioning.settings import EngineSettings
from backend.store.engine_models import EngineNode, SimulatedOperation
from backend.store.models import Cluster

# (typical seconds, p95 seconds), from shared/reference/datacenter.md; release/container/power are estimates
# (power-on boots the installed image: no PXE or image download, so shorter than a first boot).
PHASE_SECONDS: dict[OpKind, tuple[float, float]] = {
    OpKind.CONTROL_PLANE_CREATE: (180, 360),
    OpKind.CONTROL_PLANE_RELEASE: (30, 60),
    OpKind.NODE_BOOT: (360, 720),
    OpKind.FABRIC_JOIN: (20, 90),
    OpKind.DRIVERS_INSTALL: (240, 480),
    OpKind.VOLUME_ATTACH: (60, 180),
    OpKind.ORCHESTRATOR_JOIN: (60, 180),
    OpKind.ACCEPTANCE: (480, 1200),
    OpKind.CONTAINER_START: (30, 90),
    OpKind.RECONFIGURE: (60, 180),
    OpKind.CONTAINER_RECREATE: (30, 90),
    OpKind.NODE_RELEASE: (60, 180),
    OpKind.NODE_POWER_OFF: (30, 90),
    OpKind.NODE_POWER_ON: (240, 480),
    OpKind.NODE_RESTART: (300, 600),  # an estimate: warm reboot, POST of an 8-GPU server, drivers load
    OpKind.NODE_DRAIN: (1, 5),  # an estimate: one scheduler command (scontrol update / kubectl cordon)
    OpKind.NODE_RESUME: (1, 5),
    OpKind.NODE_REQUEUE: (1, 5),  # scontrol requeue of a leaving node's jobs
}
SSH_ONLY_RECONFIGURE_SECONDS = (10.0, 30.0)
BOOT_FAILURES = ("PXE boot timed out waiting for DHCP", "BMC did not confirm power-on",
                 "image checksum mismatch after download")
ACCEPTANCE_FAILURES = ("DCGM diagnostic level 3 failed on GPU {gpu}",
                       "NCCL all_reduce bus bandwidth {bw} GB/s below the 360 GB/s floor",
                       "HCA mlx5_{gpu} link down during NCCL test")
XID_FAULTS = ("XID 79: GPU {gpu} has fallen off the bus", "XID 48: double-bit ECC error on GPU {gpu}",
              "XID 94: contained ECC error on GPU {gpu}")


class SimulatedDatacenter:
    name = "simulated"
    capabilities = CAPABILITIES

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def _uniform(self, request: OperationRequest, purpose: str) -> float:
        key = (f"{self.settings.simulation_seed}|{request.cluster_name}|{request.node_name}|"
               f"{request.kind}|{request.attempt}|{purpose}")
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _draw(self, key: str) -> float:
        digest = hashlib.sha256(f"{self.settings.simulation_seed}|{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _simulated(self, seconds: float) -> dt.timedelta:
        """Modelled seconds as wall-clock time at the simulation speed (whole milliseconds)."""
        return dt.timedelta(milliseconds=int(seconds * 1000 / self.settings.simulation_speed))

    def spot_preemption(self, cluster_name: str, node_name: str, attempt: int, now: dt.datetime
                        ) -> dt.datetime | None:
        """Seeded: a spot node is reclaimed with `simulation_spot_preemption_rate` within the window after
        it starts running, never before its two-minute notice could be given."""
        key = f"spot|{cluster_name}|{node_name}|{attempt}"
        if self._draw(key + "|preempt") >= self.settings.simulation_spot_preemption_rate:
            return None
        window = self.settings.simulation_spot_preemption_window_seconds
        after = spot.NOTICE.total_seconds() + self._draw(key + "|when") * window
        return now + self._simulated(after)

    def spot_notice_at(self, reclaimed_at: dt.datetime) -> dt.datetime:
        return reclaimed_at - self._simulated(spot.NOTICE.total_seconds())

    def spot_returns_at(self, cluster_name: str, reclaimed_at: dt.datetime) -> dt.datetime:
        del cluster_name
        return reclaimed_at + self._simulated(self.settings.simulation_spot_reclaim_seconds)

    def _duration(self, request: OperationRequest) -> float:
        typical, p95 = PHASE_SECONDS[request.kind]
        if request.kind == OpKind.RECONFIGURE and not request.volumes_changed:
            typical, p95 = SSH_ONLY_RECONFIGURE_SECONDS
        u = self._uniform(request, "duration")
        seconds = typical * (0.85 + 0.3 * u) + (p95 - typical) * u**6
        return seconds / self.settings.simulation_speed

    def _outcome(self, request: OperationRequest, now: dt.datetime
                 ) -> tuple[dt.datetime | None, bool, str | None]:
        gpu = int(self._uniform(request, "gpu") * 8)
        if request.kind == OpKind.HEALTH_WATCH:
            if self._uniform(request, "fault") >= self.settings.simulation_xid_rate:
                return None, True, None
            after = self._uniform(request, "when") * self.settings.simulation_xid_window_seconds
            reason = XID_FAULTS[int(self._uniform(request, "which") * len(XID_FAULTS))].format(gpu=gpu)
            delay = dt.timedelta(milliseconds=int(after * 1000 / self.settings.simulation_speed))
            return now + delay, False, reason
        # Whole milliseconds: at very high speeds steps become instant and a pass takes many at once.
        ready = now + dt.timedelta(milliseconds=int(self._duration(request) * 1000))
        fail = self._uniform(request, "fail")
        if request.kind == OpKind.NODE_BOOT and fail < self.settings.simulation_boot_failure_rate:
            return ready, False, BOOT_FAILURES[int(self._uniform(request, "which") * len(BOOT_FAILURES))]
        if request.kind == OpKind.ACCEPTANCE and fail < self.settings.simulation_acceptance_failure_rate:
            template = ACCEPTANCE_FAILURES[int(self._uniform(request, "which") * len(ACCEPTANCE_FAILURES))]
            return ready, False, template.format(gpu=gpu, bw=200 + int(self._uniform(request, "bw") * 150))
        return ready, True, None

    def _find(self, session: Session, client_token: str) -> SimulatedOperation | None:
        # Operations added earlier in this transaction but not flushed yet are not in the identity map.
        for pending in session.new:
            if isinstance(pending, SimulatedOperation) and pending.client_token == client_token:
                return pending
        return session.get(SimulatedOperation, client_token)

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        if request.kind == OpKind.IMAGES_IMPORT:
            return self._import_images(session, request, now)
        existing = None if request.first_submission else self._find(session, request.client_token)
        if existing is None:
            ready_at, succeeded, reason = self._outcome(request, now)
            existing = SimulatedOperation(client_token=request.client_token, kind=str(request.kind),
                                          submitted_at=now, ready_at=ready_at, succeeded=succeeded,
                                          reason=reason)
            session.add(existing)
        operation = _to_operation(existing)
        if operation.succeeded and request.kind in (OpKind.NODE_BOOT, OpKind.CONTROL_PLANE_CREATE):
            operation = dataclasses.replace(operation, host_key=machine_host_key(request))
        return operation

    def _import_images(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        """The modelled registries' answer (registry.py), drawn again from the request on every submit (the
        same request gets the same answer); the operation's timing is recorded like any other."""
        cluster = session.get(Cluster, request.cluster_id) if request.cluster_id else None
        credentials = cluster_images.registry_credentials(cluster) if cluster is not None else {}
        outcomes, seconds = registry.pull(self.settings.simulation_seed, request.images, credentials)
        failures = [outcome.error for outcome in outcomes if outcome.error]
        existing = None if request.first_submission else self._find(session, request.client_token)
        if existing is None:
            existing = SimulatedOperation(client_token=request.client_token, kind=str(request.kind),
                                          submitted_at=now, ready_at=now + self._simulated(seconds),
                                          succeeded=not failures, reason="; ".join(failures) or None)
            session.add(existing)
        return dataclasses.replace(_to_operation(existing), images=outcomes)

    def get(self, session: Session, client_token: str) -> Operation | None:
        found = self._find(session, client_token)
        return None if found is None else _to_operation(found)

    def nodes_telemetry(self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
                        ) -> list[NodeTelemetry]:
        """What the nodes' agents report now: the GPUs their running jobs hold read busy (the modelled
        schedule), XID events of their health watches; with Slurm's state and reason of each node."""
        watches = telemetry.health_watches(session, targets)
        schedules: dict[str, workload.Snapshot] = {}  # one replay of the schedule per cluster
        readings = []
        for target in targets:
            watch = watches.get(target.watch_token or "")
            node = session.get(EngineNode, target.instance_id)
            if node is not None and node.cluster_id not in schedules:
                schedules[node.cluster_id] = self._schedule(session, node.cluster_id, target.cluster_name,
                                                            now)
            allocated = 0 if node is None else schedules[node.cluster_id].allocated.get(target.node_name, 0)
            reading = telemetry.node_telemetry(self.settings.simulation_seed, watch, target, now,
                                               allocated=allocated)
            readings.append(reading if node is None else _with_slurm_state(session, reading, node, watch,
                                                                             allocated))
        return readings

    def _schedule(self, session: Session, cluster_id: str, cluster_name: str, now: dt.datetime
                  ) -> workload.Snapshot:
        from backend.provisioning.node_views import node_runs  # the read model imports the drivers' types

        return self._snapshot(session, cluster_name, cluster_id, node_runs(session, cluster_id), now,
                              history=False)

    def _snapshot(self, session: Session, cluster_name: str, cluster_id: str, nodes: Sequence[NodeRun],
                  now: dt.datetime, *, history: bool = True) -> workload.Snapshot:
        return slurm.snapshot(self.settings.simulation_seed, session, cluster_name, cluster_id, nodes, now,
                              history=history)

    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: dt.datetime,
                     *, cluster_id: str) -> list[Job]:
        """The modelled schedule's jobs (those whose GPUs the node readings show busy)."""
        return self._snapshot(session, cluster_name, cluster_id, nodes, now).jobs

    def cluster_logs(self, session: Session, request: LogRequest, now: dt.datetime) -> list[str]:
        """slurmctld's or a node's log, rebuilt from the engine's records and the modelled workload."""
        jobs = self._snapshot(session, request.cluster_name, request.cluster_id, request.nodes, now).jobs
        if request.node is None:
            lines = logs.controller_lines(session, request.cluster_id, jobs, now)
        else:
            (reading,) = self.nodes_telemetry(session, [request.node], now)
            keys = logs.authorized_key_lines(session, request.cluster_id)
            lines = logs.node_lines(session, request.node.instance_id, request.node.node_name, jobs,
                                        reading, now, keys)
        return logs.render(lines, request.tail)


def machine_host_key(request: OperationRequest) -> str:
    """The SSH host key of the machine a boot brings up: a valid ed25519 key derived from the cluster, the
    node (the jumphost for the control plane) and the attempt, so it is stable across reads and a node
    replaced in place presents a new one, as a new machine would."""
    cluster = request.cluster_id or request.cluster_name
    machine = request.node_name or "jumphost"
    seed = hashlib.sha256(f"ssh-host-key|{cluster}|{machine}|{request.attempt}".encode()).digest()
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return public.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def _with_slurm_state(session: Session, reading: NodeTelemetry, node: EngineNode,
                      watch: SimulatedOperation | None, allocated: int) -> NodeTelemetry:
    """A Slurm cluster's node reading with slurmctld's state and reason of the node."""
    cluster = session.get(Cluster, node.cluster_id)
    if cluster is None or cluster.orchestrator != "slurm":
        return reading
    failed = node.stage == NodeStage.FAILED
    fault = watch.reason if watch is not None and not watch.succeeded else node.status_reason
    return replace(reading,
                   orchestrator_state=slurm.node_state(allocated, node.gpu_count, drained=node.drained,
                                                       failed=failed),
                   orchestrator_reason=slurm.node_reason(drained=node.drained, failed=failed, fault=fault))


def _to_operation(row: SimulatedOperation) -> Operation:
    submitted = row.submitted_at
    assert submitted is not None
    return Operation(row.client_token, OpKind(row.kind), submitted, row.ready_at, row.succeeded,
                     row.reason)

