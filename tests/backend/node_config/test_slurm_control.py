"""Taking a node out of Slurm before its machine goes, and putting the name back once its new machine
joined (`backend/provisioning/node_config/slurm_control.py`), against a stand-in slurmctld that keeps
node states the way `scontrol update` changes them (the real daemons:
`tests/backend/local/test_local_requeue.py`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import pytest

from backend.provisioning.node_config import slurm_control
from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeShell


@dataclass
class _Node:
    base: str = "ALLOCATED"
    flags: list[str] = field(default_factory=list)
    reason: str | None = None
    set_by: str = "root"


class FakeSlurmctld(NodeShell):
    """`scontrol show node NAME -o` and `scontrol update NodeName=... State=DOWN|DRAIN|RESUME`, as 22.05
    answers them: DOWN and DRAIN keep each other, RESUME clears both and the reason, and refuses a node
    that is neither down nor drained."""

    def __init__(self, **nodes: _Node) -> None:
        self.name = "jumphost"
        self.nodes = nodes
        self.updates: list[list[str]] = []
        self.answering = True

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        if not self.answering:
            return CommandResult(1, "", "slurm_load_node error: Unable to contact slurm controller")
        argv = shlex.split(remote_command)
        if argv[:3] == ["scontrol", "show", "node"]:
            node = self.nodes.get(argv[3])
            if node is None:
                return CommandResult(1, "", f"Node {argv[3]} not found\n")
            state = "+".join([node.base, *node.flags])
            line = f"NodeName={argv[3]} Arch=x86_64 CPUAlloc=0 State={state} Partitions=gpu"
            if node.reason is not None:
                line += f" Reason={node.reason} [{node.set_by}@2026-12-03T08:00:00]"
            return CommandResult(0, line + "\n", "")
        assert argv[:2] == ["scontrol", "update"], argv
        self.updates.append(argv[2:])
        fields = dict(word.split("=", 1) for word in argv[2:])
        node = self.nodes[fields["NodeName"]]
        if fields["State"] == "RESUME":
            if node.base != "DOWN" and "DRAIN" not in node.flags:
                return CommandResult(1, "", "slurm_update error: Invalid node state specified\n")
            node.base, node.flags, node.reason = "IDLE", [], None
            return CommandResult(0, "", "")
        if "Reason" not in fields:
            return CommandResult(1, "", "You must specify a reason when DOWNING or DRAINING a node\n")
        node.reason, node.set_by = fields["Reason"], "root"
        if fields["State"] == "DOWN":
            node.base = "DOWN"
        elif "DRAIN" not in node.flags:
            node.flags.append("DRAIN")
        return CommandResult(0, "", "")


def test_slurm_control_take_down_ends_the_jobs_and_keeps_the_name_out_until_resumed() -> None:
    slurmctld = FakeSlurmctld(**{"train-1": _Node()})
    reason = slurm_control.take_down(slurmctld, "train-1", "slurmd is not running (node crashed)")
    assert reason == "gpucloud repair: slurmd is not running (node crashed)"
    # DOWN first (Slurm requeues or fails the node's jobs right then), DRAIN so that no job lands on it
    # if a live slurmd re-registers before the machine goes (ReturnToService=2).
    assert [u[1] for u in slurmctld.updates] == ["State=DOWN", "State=DRAIN"]
    assert slurmctld.updates[0] == ["NodeName=train-1", "State=DOWN", f"Reason={reason}"]
    found = slurm_control.slurm_node(slurmctld, "train-1")
    assert found == slurm_control.SlurmNode("DOWN+DRAIN", reason, "root") and found.drained
    # Again (a pass replayed, or the release after the health watch): the same state, the latest why.
    assert slurm_control.take_down(slurmctld, "train-1", "replaced after a fault", machine_replaced=True) == (
        "gpucloud repair: replaced after a fault")
    # The new machine joined under the name: gpucloud's own down and drain are undone.
    assert slurm_control.resume_after_repair(slurmctld, "train-1")
    assert (slurmctld.nodes["train-1"].base, slurmctld.nodes["train-1"].reason) == ("IDLE", None)
    assert not slurm_control.resume_after_repair(slurmctld, "train-1")  # nothing left to undo


def test_slurm_control_resume_after_repair_works_from_down_as_from_drain() -> None:
    slurmctld = FakeSlurmctld(down=_Node("DOWN", [], "gpucloud repair: restarted"),
                              drained=_Node("IDLE", ["DRAIN"], "gpucloud repair: replaced"),
                              back=_Node("IDLE", [], None))  # ReturnToService=2 already took it back
    assert slurm_control.resume_after_repair(slurmctld, "down")
    assert slurm_control.resume_after_repair(slurmctld, "drained")
    assert not slurm_control.resume_after_repair(slurmctld, "back")
    assert not slurm_control.resume_after_repair(slurmctld, "unknown")
    assert {name: node.base for name, node in slurmctld.nodes.items()} == {
        "down": "IDLE", "drained": "IDLE", "back": "IDLE"}


@pytest.mark.parametrize("machine_replaced", [False, True])
def test_slurm_control_take_down_never_takes_over_an_operators_drain(machine_replaced: bool) -> None:
    """An operator's drain outlives a restart and a repair: the node goes DOWN with that reason kept,
    and the name is not resumed when the machine is back."""
    reason = "maintenance: PSU swap (ticket 4711)"
    slurmctld = FakeSlurmctld(**{"train-1": _Node("MIXED", ["DRAIN"], reason, "alice")})
    assert slurm_control.take_down(slurmctld, "train-1", "XID 79: GPU has fallen off the bus",
                                   machine_replaced=machine_replaced) == reason
    assert slurmctld.nodes["train-1"].base == "DOWN" and slurmctld.nodes["train-1"].reason == reason
    assert not slurm_control.resume_after_repair(slurmctld, "train-1")
    assert slurmctld.nodes["train-1"].flags == ["DRAIN"]


def test_slurm_control_take_down_keeps_slurms_own_drain_on_a_restart_not_on_a_new_machine() -> None:
    """Slurm's own drain (set by its SlurmUser) judged the machine: kept through a restart of that
    machine, taken over when a new machine replaces it."""
    slurmctld = FakeSlurmctld(a=_Node("IDLE", ["DRAIN"], "Kill task failed", "slurm"),
                              b=_Node("IDLE", ["DRAIN"], "Kill task failed", "slurm"))
    assert slurm_control.take_down(slurmctld, "a", "restart requested") == "Kill task failed"
    assert not slurm_control.resume_after_repair(slurmctld, "a")
    assert slurm_control.take_down(slurmctld, "b", "replaced", machine_replaced=True) == (
        "gpucloud repair: replaced")
    assert slurm_control.resume_after_repair(slurmctld, "b")


def test_slurm_control_take_down_keeps_the_drain_node_action_across_a_restart_not_a_replacement() -> None:
    """The engine's own drain (node action) stays on the node through a restart (the engine still has
    it drained); a replacement starts undrained in the engine, so Slurm resumes the name too."""
    action = slurm_control.ACTION_REASON
    slurmctld = FakeSlurmctld(a=_Node("IDLE", ["DRAIN"], action), b=_Node("IDLE", ["DRAIN"], action))
    assert slurm_control.take_down(slurmctld, "a", "restart requested") == action
    assert not slurm_control.resume_after_repair(slurmctld, "a")
    assert slurm_control.take_down(slurmctld, "b", "replaced by a node action", machine_replaced=True) == (
        "gpucloud repair: replaced by a node action")
    assert slurm_control.resume_after_repair(slurmctld, "b")


def test_slurm_control_take_down_of_a_node_slurm_does_not_know_or_a_silent_controller() -> None:
    slurmctld = FakeSlurmctld()
    assert slurm_control.take_down(slurmctld, "train-9", "crashed") is None and slurmctld.updates == []
    slurmctld.answering = False
    assert slurm_control.take_down(slurmctld, "train-9", "crashed") is None


def test_slurm_control_take_down_reason_is_one_short_line() -> None:
    slurmctld = FakeSlurmctld(n=_Node())
    why = "the node does not answer over ssh: n: `true` exited 255:\nConnection timed out " + "x" * 500
    reason = slurm_control.take_down(slurmctld, "n", why)
    assert reason is not None and "\n" not in reason and len(reason) == slurm_control.MAX_REASON
    assert reason.startswith("gpucloud repair: the node does not answer over ssh: n: `true` exited 255: Conn")


def test_slurm_control_take_down_raises_what_scontrol_said() -> None:
    class Refusing(FakeSlurmctld):
        def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
            if "update" in remote_command:
                return CommandResult(1, "", "slurm_update error: Access/permission denied\n")
            return super()._execute(remote_command, stdin, timeout)

    with pytest.raises(NodeCommandError, match=r"scontrol down n.*Access/permission denied"):
        slurm_control.take_down(Refusing(n=_Node()), "n", "crashed")


def test_slurm_control_parses_state_and_reason_without_who_set_it() -> None:
    line = ("NodeName=train-1 Arch=x86_64 State=DOWN+DRAIN+NOT_RESPONDING Partitions=gpu "
            "Reason=gpucloud repair: XID 79 [GPU 3] lost [root@2026-12-03T08:01:02]")
    assert slurm_control.parse_node(line) == slurm_control.SlurmNode(
        "DOWN+DRAIN+NOT_RESPONDING", "gpucloud repair: XID 79 [GPU 3] lost", "root")
    idle = "NodeName=n State=IDLE Partitions=gpu"
    assert slurm_control.parse_node(idle) == slurm_control.SlurmNode("IDLE", None)
    assert slurm_control.parse_node("") is None
    assert not slurm_control.SlurmNode("IDLE", None).drained
    assert slurm_control.SlurmNode("MIXED+DRAIN", "x").drained
    # A drain someone chose (acceptance lets such a node in after a restart), or Slurm's own judgement.
    chosen = slurm_control.SlurmNode("IDLE+DRAIN", slurm_control.ACTION_REASON, "root")
    assert chosen.chosen_drain
    assert not slurm_control.SlurmNode("IDLE+DRAIN", "Low RealMemory", "slurm").chosen_drain
    assert not slurm_control.SlurmNode("IDLE+DRAIN", "gpucloud repair: restarted", "root").chosen_drain
    assert not slurm_control.SlurmNode("IDLE", "Not responding", "root").chosen_drain
