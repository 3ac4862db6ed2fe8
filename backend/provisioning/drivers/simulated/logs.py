"""The simulated datacenter's logs: what slurmctld (the controller) and each node's slurmd and kernel
would have written, in their formats, from what the engine recorded (control plane, node status
transitions), the modelled jobs and the XID events of the node agents' readings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.provisioning.driver import Job, NodeTelemetry
from backend.store.engine_models import EngineCluster, NodeTransition
from backend.store.models import ClusterSshKey, SshKey

SLURM_VERSION = "22.05.8"
_NODE_STATE = {"RUNNING": "IDLE", "FAILED": "DOWN", "DESTROYING": "DOWN", "PAUSED": "POWERED_DOWN",
               "CONFIGURING": "UNKNOWN", "CONTAINER_CREATING": "UNKNOWN"}


def _stamp(at: dt.datetime) -> str:
    return "[" + at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "]"


def controller_lines(session: Session, cluster_id: str, jobs: Sequence[Job], now: dt.datetime
                     ) -> list[tuple[dt.datetime, str]]:
    lines: list[tuple[dt.datetime, str]] = []
    engine_state = session.get(EngineCluster, cluster_id)
    if engine_state is not None and engine_state.control_plane_ready_at is not None:
        lines.append((engine_state.control_plane_ready_at,
                      f"slurmctld version {SLURM_VERSION} started on cluster {cluster_id}"))
    transitions = session.scalars(select(NodeTransition).where(NodeTransition.cluster_id == cluster_id))
    for t in transitions:
        state = _NODE_STATE.get(t.to_status)
        if t.to_status == "FAILED":
            lines.append((t.at, f"error: Nodes {t.node_name} not responding, setting DOWN ({t.reason})"))
        elif t.to_status == "RUNNING":
            lines.append((t.at, f"Node {t.node_name} now responding"))
        elif state is not None and t.from_status == "RUNNING":
            lines.append((t.at, f"update_node: node {t.node_name} state set to {state}"))
    for job in jobs:
        lines.append((job.submitted_at,
                      f"_slurm_rpc_submit_batch_job: JobId={job.job_id} InitPrio={job.priority}"))
        if job.started_at is not None and job.started_at <= now:
            lines.append((job.started_at, f"sched: Allocate JobId={job.job_id} NodeList={job.nodes} "
                                          f"#GPUs={job.gpus} Partition={job.partition}"))
        if job.ended_at is not None and job.ended_at <= now:
            why = job.reason or job.state
            status = "WEXITSTATUS 0" if job.state == "COMPLETED" else f"WTERMSIG 9 ({why})"
            lines.append((job.ended_at, f"_job_complete: JobId={job.job_id} {status}"))
            lines.append((job.ended_at, f"_job_complete: JobId={job.job_id} done"))
    return _until(lines, now)


def _until(lines: list[tuple[dt.datetime, str]], now: dt.datetime) -> list[tuple[dt.datetime, str]]:
    """The lines up to `now`, every time aware (SQLite hands back naive UTC)."""
    aware = [(at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC), line) for at, line in lines]
    return [(at, line) for at, line in aware if at <= now]


def authorized_key_lines(session: Session, cluster_id: str) -> list[str]:
    """What cloud-init prints at boot for the keys it installs (type, fingerprint, the key's comment as
    the user wrote it): the user's own text in a node's log, as on a real machine."""
    keys = session.execute(select(SshKey.key_type, SshKey.fingerprint, SshKey.public_key)
                           .join(ClusterSshKey, ClusterSshKey.ssh_key_id == SshKey.id)
                           .where(ClusterSshKey.cluster_id == cluster_id).order_by(ClusterSshKey.position))
    return [f"cloud-init: ci-info: authorized key for ubuntu: {key_type} {fingerprint} "
            f"{' '.join(public_key.split()[2:]) or '-'}" for key_type, fingerprint, public_key in keys]


def node_lines(session: Session, instance_id: str, node: str, jobs: Sequence[Job],
               telemetry: NodeTelemetry | None, now: dt.datetime, authorized_keys: Sequence[str] = ()
               ) -> list[tuple[dt.datetime, str]]:
    lines: list[tuple[dt.datetime, str]] = []
    for t in session.scalars(select(NodeTransition).where(NodeTransition.node_id == instance_id)):
        if t.to_status == "PROVISIONING":
            lines.append((t.at, "kernel: Linux version 5.15.0-105-generic (buildd@lcy02-amd64-054)"))
        elif t.to_status == "RUNNING":
            lines.extend((t.at, line) for line in authorized_keys)
            lines.append((t.at, f"slurmd: slurmd version {SLURM_VERSION} started"))
            lines.append((t.at, f"slurmd: CPUs=224 Boards=1 Sockets=2 Cores=56 Threads=2 Gres=gpu:8 "
                                f"(node {node})"))
        elif t.to_status == "FAILED":
            lines.append((t.at, f"slurmd: error: health check failed: {t.reason}"))
        elif t.to_status == "DESTROYING":
            lines.append((t.at, "slurmd: Slurmd shutdown completing"))
    for event in telemetry.xid_events if telemetry is not None else ():
        if event.logged_at is not None:
            at = dt.datetime.fromisoformat(event.logged_at)
            lines.append((at, f"kernel: NVRM: Xid (PCI:{event.pci_bus_id}): {event.code}, {event.detail}"))
    for job in jobs:
        if job.nodes != node or job.started_at is None:
            continue
        lines.append((job.started_at, f"slurmd: launch task StepId={job.job_id}.batch request from UID:1000"))
        if job.ended_at is not None:
            lines.append((job.ended_at, f"slurmd: [{job.job_id}.batch] done with job"))
    return _until(lines, now)


def render(lines: list[tuple[dt.datetime, str]], tail: int) -> list[str]:
    """The last `tail` lines in time order, each with slurm's timestamp prefix."""
    ordered = sorted(lines)
    return [f"{_stamp(at)} {line}" for at, line in ordered[-tail:]]
