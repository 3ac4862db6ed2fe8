"""A node's state in the cluster's real Slurm (`scontrol update` on the controller): the `drain` /
`resume` node actions, and taking a node out before its machine goes (a repair, a restart, a fault
found by the health watch), so that Slurm requeues or fails its jobs at once instead of leaving them
RUNNING on a dead machine; the new machine, which registers under the same name, is resumed when it
joins.

Every command runs on the controller through its `NodeShell` (SSH under the local driver), so a driver
for other hosts reuses this unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeShell

# Slurm keeps a node's drain and its reason across slurmd restarts and machine swaps (they are the node
# name's); the reason says who set them, so gpucloud undoes its own on rejoin and never an operator's.
REPAIR_REASON = "gpucloud repair"
ACTION_REASON = "gpucloud: drain node action"
MAX_REASON = 200  # a reason is one line for `sinfo -R`; the engine keeps the whole story
# Slurm shows who set a reason and when after it: `Reason=... [root@2026-12-03T08:01:02]`; what slurmctld
# decides itself (a shape it refuses, a task it could not kill) is set by its SlurmUser.
_SET_BY = re.compile(r"\s*\[([^\[\]@]*)@[^\[\]]*\]$")
SLURM_USER = "slurm"  # `SlurmUser` of the generated slurm.conf (backend/fabric/slurm.py)


@dataclass(frozen=True)
class SlurmNode:
    """What slurmctld says of one node: `state` as `scontrol show node` prints it (`IDLE+DRAIN`,
    `DOWN+DRAIN+NOT_RESPONDING`...), `reason` without who set it and when (None: no reason)."""

    state: str
    reason: str | None
    set_by: str | None = None  # who set the reason (`slurm`: slurmctld itself)

    @property
    def drained(self) -> bool:
        return any(flag.startswith("DRAIN") for flag in self.state.split("+"))

    @property
    def chosen_drain(self) -> bool:
        """Drained by someone's choice (an operator, the drain node action), not by Slurm's own
        judgement of the machine; gpucloud's repair drain is not a choice either."""
        return (self.drained and self.reason is not None and self.set_by != SLURM_USER
                and not self.reason.startswith(REPAIR_REASON))


def run_on_controller(controller: NodeShell, argv: Sequence[str]) -> CommandResult:
    """Run one command on the cluster's controller; a controller that does not answer raises."""
    return controller.run(argv, check=False)


def drain_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def down_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DOWN", f"Reason={reason}"]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def drain(controller: NodeShell, node: str, reason: str) -> None:
    """No new work lands on `node`; running jobs are left to finish (Slurm's DRAIN)."""
    _check(controller, run_on_controller(controller, drain_argv(node, reason)), f"drain {node}")


def take_down(controller: NodeShell, node: str, why: str, *, machine_replaced: bool = False) -> str | None:
    """`node`'s machine is gone or about to go: Slurm's DOWN, which ends its jobs at once (a batch job
    that may be requeued, `JobRequeue=1`, goes back to the queue; any other fails with NODE_FAIL), plus
    DRAIN, so that a slurmd still alive re-registering (`ReturnToService=2`) gets no work until the
    machine is back and resumed. The reason is `gpucloud repair: <why>`, which `resume_after_repair`
    undoes, unless the node is drained for another reason: that reason is kept, so the drain outlives
    the restart or repair. With `machine_replaced` the drains that were about the old machine are taken
    over (Slurm's own, and the engine's drain node action: the new machine starts undrained in the
    engine); an operator's is still kept. Returns the reason set (None: slurmctld does not know the
    node). Idempotent."""
    current = slurm_node(controller, node)
    if current is None:
        return None
    reason = f"{REPAIR_REASON}: {' '.join(why.split())}"[:MAX_REASON]
    if current.drained and current.reason is not None and not current.reason.startswith(REPAIR_REASON):
        # Slurm's own drain judged the old machine; the drain node action is the engine's, which has
        # the new machine undrained. Both go with a replaced machine; any other drain is kept.
        taken_over = current.set_by == SLURM_USER or current.reason.startswith(ACTION_REASON)
        if not (machine_replaced and taken_over):
            reason = current.reason
    _check(controller, run_on_controller(controller, down_argv(node, reason)), f"down {node}")
    _check(controller, run_on_controller(controller, drain_argv(node, reason)), f"drain {node}")
    return reason


def resume(controller: NodeShell, node: str) -> None:
    """Undo a drain or a down; a node that is neither is left as it is (the call is idempotent)."""
    done = run_on_controller(controller, resume_argv(node))
    if done.returncode != 0 and "Invalid node state" in done.stdout + done.stderr:
        return  # Slurm refuses RESUME on a node that is neither drained nor down: nothing to undo
    _check(controller, done, f"resume {node}")


def slurm_node(controller: NodeShell, node: str) -> SlurmNode | None:
    """slurmctld's state and reason of `node` (None: slurmctld does not answer or know the node)."""
    done = run_on_controller(controller, ["scontrol", "show", "node", node, "-o"])
    if done.returncode != 0:
        return None
    return parse_node(done.stdout.strip())


def parse_node(line: str) -> SlurmNode | None:
    """One line of `scontrol show node -o` (None: not a node's line)."""
    if not line.startswith("NodeName="):
        return None
    before, found, reason = line.partition(" Reason=")  # the last field: it may hold spaces
    state = next((field.removeprefix("State=") for field in before.split() if field.startswith("State=")), "")
    reason = reason.strip() if found else ""
    set_by = _SET_BY.search(reason)
    return SlurmNode(state, _SET_BY.sub("", reason) or None, set_by.group(1) if set_by else None)


def drain_reason(controller: NodeShell, node: str) -> str | None:
    """Slurm's Reason of `node` (None: none set, or slurmctld does not know the node)."""
    found = slurm_node(controller, node)
    return None if found is None else found.reason


def resume_after_repair(controller: NodeShell, node: str) -> bool:
    """Resume `node` if gpucloud took it out for a repair or restart (drained, or down, with the repair
    reason): its new machine has joined under the same name. An operator's drain, or Slurm's own, is
    left alone. True if resumed."""
    found = slurm_node(controller, node)
    if found is None or found.reason is None or not found.reason.startswith(REPAIR_REASON):
        return False
    resume(controller, node)
    return True


def _check(controller: NodeShell, done: CommandResult, what: str) -> None:
    if done.returncode != 0:
        said = done.stdout + done.stderr
        raise NodeCommandError(controller.name, f"scontrol {what}", done.returncode, said)
