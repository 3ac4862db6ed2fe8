"""Drain and resume a node in the cluster's real Slurm (`scontrol update` on the controller): the
`drain` / `resume` node actions, and the drain of a node being replaced in place (its successor, which
registers under the same name, is resumed when it joins).

Every command runs on the controller through its `NodeShell` (SSH under the local driver), so a driver
for other hosts reuses this unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeShell

# Slurm keeps a node's drain across slurmd restarts and machine swaps (the state is the node name's);
# the reason says who drained it, so a repair's drain is undone on rejoin and an operator's never is.
REPAIR_REASON = "gpucloud repair"
ACTION_REASON = "gpucloud: drain node action"


def run_on_controller(controller: NodeShell, argv: Sequence[str]) -> CommandResult:
    """Run one command on the cluster's controller; a controller that does not answer raises."""
    return controller.run(argv, check=False)


def drain_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def drain(controller: NodeShell, node: str, reason: str) -> None:
    """No new work lands on `node`; running jobs are left to finish (Slurm's DRAIN)."""
    _check(controller, run_on_controller(controller, drain_argv(node, reason)), f"drain {node}")


def resume(controller: NodeShell, node: str) -> None:
    """Undo a drain; a node that is not drained is left as it is (the call is idempotent)."""
    done = run_on_controller(controller, resume_argv(node))
    if done.returncode != 0 and "Invalid node state" in done.stdout + done.stderr:
        return  # Slurm refuses RESUME on a node that is neither drained nor down: nothing to undo
    _check(controller, done, f"resume {node}")


def drain_reason(controller: NodeShell, node: str) -> str | None:
    """Slurm's Reason of `node` (None: none set, or slurmctld does not know the node)."""
    done = run_on_controller(controller, ["scontrol", "show", "node", node, "-o"])
    if done.returncode != 0:
        return None
    _, found, reason = done.stdout.strip().partition(" Reason=")  # the last field: it may hold spaces
    return reason.strip() or None if found else None


def resume_after_repair(controller: NodeShell, node: str) -> bool:
    """Resume `node` if a repair drained it (its new machine joins under the same name); True if so."""
    reason = drain_reason(controller, node)
    if reason is None or not reason.startswith(REPAIR_REASON):
        return False
    resume(controller, node)
    return True


def _check(controller: NodeShell, done: CommandResult, what: str) -> None:
    if done.returncode != 0:
        said = done.stdout + done.stderr
        raise NodeCommandError(controller.name, f"scontrol {what}", done.returncode, said)
