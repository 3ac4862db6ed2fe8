"""Real faults on local nodes, for tests and demos: `gpucloud-backend fault --cluster ID --node NAME KIND`.

`crash` kills the node's slurmd (SIGKILL, `kill -9`), as a kernel panic or an OOM-killed daemon would; the
job steps it started are not told, as on a real machine. `xid` also writes an XID line in the format the
NVIDIA driver logs to the node's kernel log (the stand-in for `dmesg`, since the node has no GPU
driver). Neither tells the engine or Slurm anything: the engine's health watch reads the node and finds
the failure, through the same path as a failure nobody injected, and sets the node DOWN in Slurm (its
jobs requeued: docs/engine.md, "Repair and running jobs").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning.drivers.local.driver import LocalDriver, instance_name
from backend.store.engine_models import EngineCluster, EngineNode

FAULT_KINDS = ("crash", "xid")
XID_LINE = "NVRM: Xid (PCI:0000:00:06): 79, pid=0, name=gpucloud-fault, GPU has fallen off the bus."


def inject_fault(session: Session, driver: LocalDriver, cluster_id: str, node_name: str, kind: str) -> str:
    """Make one member node fail for real; returns what was done (raises LookupError for a bad name)."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, not {kind!r}")
    state = session.get(EngineCluster, cluster_id)
    if state is None or state.finished:
        raise LookupError(f"cluster {cluster_id} has no running nodes")
    row = session.scalar(select(EngineNode).where(EngineNode.cluster_id == cluster_id,
                                                  EngineNode.active_name == node_name,
                                                  EngineNode.stage != str(NodeStage.RELEASED)))
    if row is None:
        raise LookupError(f"cluster {cluster_id} has no node named {node_name!r}")
    node = driver.cluster(cluster_id, state.subnet).node(row.name, row.private_ip, instance_name(row))
    if not node.exists():
        raise LookupError(f"node {node_name} of cluster {cluster_id} does not exist on this machine")
    if kind == "xid":
        stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        with (node.dir / "xid.log").open("a") as log:
            log.write(f"{stamp} {XID_LINE}\n")
    killed = node.running("slurmd")
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return f"{kind} on {node_name}: slurmd killed ({len(killed)} process(es))"
