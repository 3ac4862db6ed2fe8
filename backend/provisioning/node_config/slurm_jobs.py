"""Requeue the jobs running on a node in the cluster's real Slurm (`scontrol requeue` on the controller):
a scale-down whose `scale_down_grace_minutes` ran out before a drained node's jobs ended puts them back
in the queue (they restart on the remaining nodes) before the node is released, so no job is silently
killed (docs/engine.md, "Scale-down and running jobs").

Every command runs on the controller through its `NodeShell` (SSH under the local driver), so a driver
for other hosts reuses this unchanged.
"""

from __future__ import annotations

from backend.provisioning.node_config.shell import NodeCommandError, NodeShell
from backend.provisioning.node_config.slurm_control import run_on_controller

# States of a job that still holds the node (COMPLETING: its processes are being ended).
HOLDING_STATES = "RUNNING,SUSPENDED,COMPLETING,CONFIGURING"


def jobs_on_node_argv(node: str) -> list[str]:
    return ["squeue", "--noheader", "--format=%i", f"--nodelist={node}", f"--states={HOLDING_STATES}"]


def requeue_argv(job_ids: list[str]) -> list[str]:
    return ["scontrol", "requeue", ",".join(job_ids)]


def jobs_on_node(controller: NodeShell, node: str) -> list[str]:
    """The ids of the jobs holding `node` (running on it, alone or with other nodes), as squeue prints
    them: `1234`, or `1234_5` for one task of an array (only that task is requeued, not its array)."""
    done = run_on_controller(controller, jobs_on_node_argv(node))
    if done.returncode != 0:
        raise NodeCommandError(controller.name, f"squeue --nodelist={node}", done.returncode,
                               done.stdout + done.stderr)
    words = {word for word in done.stdout.split() if word.replace("_", "").isdigit()}
    return sorted(words, key=lambda word: tuple(int(part) for part in word.split("_")))


def requeue_node_jobs(controller: NodeShell, node: str) -> list[str]:
    """Requeue every job holding `node` (Slurm ends them and queues them again, keeping their ids; a
    drained node gets none of them back). Idempotent: with no job left on the node it does nothing, and
    a job Slurm already requeued (pending again) is not an error. Returns the ids requeued."""
    job_ids = jobs_on_node(controller, node)
    if not job_ids:
        return []
    done = run_on_controller(controller, requeue_argv(job_ids))
    said = done.stdout + done.stderr
    if done.returncode != 0 and "pending" not in said.lower() and "already" not in said.lower():
        raise NodeCommandError(controller.name, f"scontrol requeue {','.join(job_ids)}",
                               done.returncode, said)
    return job_ids
