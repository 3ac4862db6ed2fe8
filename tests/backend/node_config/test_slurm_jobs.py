"""Requeueing the jobs left on a node a scale-down removes (`backend/provisioning/node_config/slurm_jobs.py`),
against a stand-in controller that answers `squeue` and `scontrol requeue` as Slurm 22.05 does."""

from __future__ import annotations

import shlex

import pytest

from backend.provisioning.node_config import slurm_jobs
from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeShell


class FakeController(NodeShell):
    """Jobs per node; `scontrol requeue` makes them pending (a pending job answers Slurm's error)."""

    def __init__(self, jobs: dict[str, list[str]]) -> None:
        self.name = "jumphost"
        self.jobs = jobs
        self.pending: set[str] = set()
        self.commands: list[list[str]] = []

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        argv = shlex.split(remote_command)
        self.commands.append(argv)
        if argv[0] == "squeue":
            node = next(a for a in argv if a.startswith("--nodelist=")).partition("=")[2]
            running = [j for j in self.jobs.get(node, []) if j not in self.pending]
            return CommandResult(0, "".join(f"{j}\n" for j in running), "")
        if argv[:2] == ["scontrol", "requeue"]:
            ids = argv[2].split(",")
            if any(i in self.pending for i in ids):
                return CommandResult(1, "", "scontrol: error: Job is pending execution")
            self.pending.update(ids)
            return CommandResult(0, "", "")
        return CommandResult(1, "", f"unexpected {argv}")


def test_slurm_jobs_requeues_every_job_holding_the_node_once() -> None:
    controller = FakeController({"train-1": ["15_10", "12", "15_4"], "train-0": ["11"]})
    # Only the array's tasks on the node, not the whole array.
    assert slurm_jobs.requeue_node_jobs(controller, "train-1") == ["12", "15_4", "15_10"]
    assert controller.commands[-1] == ["scontrol", "requeue", "12,15_4,15_10"]
    assert controller.commands[0] == ["squeue", "--noheader", "--format=%i", "--nodelist=train-1",
                                      f"--states={slurm_jobs.HOLDING_STATES}"]
    assert slurm_jobs.requeue_node_jobs(controller, "train-1") == []  # nothing left: no command
    assert controller.commands[-1][0] == "squeue"


def test_slurm_jobs_a_controller_that_fails_raises() -> None:
    class Broken(FakeController):
        def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
            return CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")

    with pytest.raises(NodeCommandError):
        slurm_jobs.requeue_node_jobs(Broken({}), "train-1")
