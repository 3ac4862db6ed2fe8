"""Elastic Slurm clusters (backend.provisioning.power_saving): the generated slurm.conf declares every
name up to max_nodes (CLOUD where no machine is) with power saving; the request file Slurm's
ResumeProgram/SuspendProgram write is parsed, settled against the members and pruned; the autoscaler
turns the requests into its decisions."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

from backend.fabric import slurm
from backend.provisioning import autoscaler, power_saving
from backend.provisioning.driver import NodeRun, PowerRequests
from tests.backend.engine.test_fabric import layout

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _power(members: list[str], *, max_nodes: int = 4) -> slurm.PowerSaving:
    return power_saving.power_saving("train", members, min_nodes=1, max_nodes=max_nodes, idle_minutes=10)


def test_slurm_conf_declares_every_node_up_to_max_nodes_with_power_saving() -> None:
    placed = layout(2)
    power = _power(["train-0", "train-1"])
    assert power.cloud_nodes == ("train-2", "train-3")
    conf = slurm.slurm_conf(placed, power=power).splitlines()
    cloud = [line for line in conf if line.startswith("NodeName=train-[2-3] ")]
    assert len(cloud) == 1 and cloud[0].endswith("Feature=ib-east-a State=CLOUD"), cloud
    assert "Gres=gpu:h100:8" in cloud[0]
    assert next(line for line in conf if line.startswith("PartitionName=gpu ")).startswith(
        "PartitionName=gpu Nodes=train-[0-3] ")
    for line in ("ResumeProgram=/etc/slurm/gpucloud-resume", "SuspendProgram=/etc/slurm/gpucloud-suspend",
                 "SuspendTime=600", "ResumeTimeout=600", "SuspendTimeout=120",
                 "SuspendExcNodes=train-[0-3]:1", "SlurmctldParameters=cloud_reg_addrs,idle_on_node_suspend",
                 "PrivateData=cloud", "TopologyPlugin=topology/tree"):
        assert line in conf, line
    # The cloud nodes sit under a switch of their own until placed; the spines reach them.
    topology = slurm.topology_conf(placed, power.cloud_nodes).splitlines()
    assert "SwitchName=ib-east-a-cloud Nodes=train-[2-3]" in topology
    assert topology[-1].startswith("SwitchName=ib-east-a-spines")
    assert topology[-1].endswith(",ib-east-a-cloud")
    # The declared names do not depend on membership: only their State does.
    fewer = slurm.slurm_conf(layout(1), power=_power(["train-0"])).splitlines()
    assert "NodeName=train-[1-3] " in "\n".join(fewer) and "SuspendExcNodes=train-[0-3]:1" in fewer
    # A node joining moves its name from the CLOUD line to its unit's: a reconfigure, not a restart.
    three = slurm.slurm_conf(layout(3), power=_power(["train-0", "train-1", "train-2"]))
    assert slurm.restart_part(three) == slurm.restart_part("\n".join(conf))
    assert slurm.restart_part(slurm.slurm_conf(placed, power=_power(["train-0", "train-1"], max_nodes=5))
                              ) != slurm.restart_part("\n".join(conf))
    # A member is never CLOUD too, whatever the caller's view of the members (slurmctld would refuse).
    stale = slurm.slurm_conf(placed, power=_power(["train-0"])).splitlines()
    assert "NodeName=train-[2-3] " in "\n".join(stale) and "SuspendExcNodes=train-[0-3]:1" in stale
    stale_topology = slurm.topology_conf(placed, ("train-1", "train-2", "train-3"))
    assert "SwitchName=ib-east-a-cloud Nodes=train-[2-3]" in stale_topology
    # Without power saving, nothing of it.
    plain = slurm.slurm_conf(placed)
    assert "CLOUD" not in plain and "ResumeProgram" not in plain and "Nodes=train-[0-1] " in plain


def test_requests_are_parsed_settled_against_the_members_and_pruned(tmp_path: Path) -> None:
    text = "resume train-2\nresume train-3\ngarbage\nsuspend train-1\nresume train-9\nsuspend train-0\n" \
           "resume train-0\n"
    parsed = power_saving.parse(text)
    assert parsed[:3] == [("resume", "train-2"), ("resume", "train-3"), ("suspend", "train-1")]
    pending, done = power_saving.settle(parsed, ["train-0", "train-1", "train-3"],
                                        power_saving.names("train", 4))
    # train-2 has no machine; train-1 was powered down; train-3 joined; train-9 is not a name of ours;
    # train-0's latest request is a resume and it is a member.
    assert pending == PowerRequests(resume=("train-2",), suspend=("train-1",))
    assert done == {"train-3", "train-9", "train-0"}

    # The prune drops the settled names' lines among those read, keeping what was appended since.
    requests = tmp_path / "requests"
    requests.write_text(text + "resume train-3\n")
    script = power_saving.prune_script(len(text.splitlines()), done).replace(
        power_saving.REQUEST_FILE, str(requests))
    subprocess.run(["sh", "-c", script], check=True)
    assert requests.read_text() == "resume train-2\ngarbage\nsuspend train-1\nresume train-3\n"
    script = power_saving.prune_script(10, {"train-2", "train-1", "train-3", "garbage"}).replace(
        power_saving.REQUEST_FILE, str(requests))
    subprocess.run(["sh", "-c", script], check=True)
    assert requests.read_text() in ("", "garbage\n")


def test_the_programs_append_one_line_per_node_under_the_lock() -> None:
    resume = power_saving.program("resume")
    assert resume.startswith("#!/bin/sh\n") and f"exec 9>>{power_saving.REQUEST_FILE}" in resume
    assert "flock 9" in resume and 'scontrol show hostnames "$1" | sed "s/^/resume /"' in resume
    assert 'sed "s/^/suspend /"' in power_saving.program("suspend")


def _run(name: str) -> NodeRun:
    return NodeRun(name=name, index=int(name.rsplit("-", 1)[1]), attempt=1, gpu_count=8, up_since=EPOCH,
                   failed_at=None, drained=False)


def test_power_requests_decide_before_the_queue() -> None:
    scaling = autoscaler.Range(1, 4, dt.timedelta(minutes=10))
    runs = [_run("train-0"), _run("train-1")]
    up = autoscaler.decide(scaling, runs, [], free_nodes=10, now=EPOCH,
                           power=PowerRequests(resume=("train-2", "train-3")))
    assert up is not None and (up.node_count, up.remove) == (4, ())
    assert up.reason.startswith("Slurm resumed train-[2-3] for jobs pending for lack of nodes")
    capped = autoscaler.decide(scaling, runs, [], free_nodes=1, now=EPOCH,
                               power=PowerRequests(resume=("train-2", "train-3")))
    assert capped is not None and capped.node_count == 3 and "capped by capacity" in capped.reason
    # Slurm waits for nodes the fabric cannot give: no change, only said why, and never a scale-down.
    waiting = autoscaler.decide(scaling, runs, [], free_nodes=0, now=EPOCH + dt.timedelta(hours=1),
                                power=PowerRequests(resume=("train-2",)))
    assert waiting is not None and waiting.waiting and (waiting.node_count, waiting.remove) == (2, ())
    assert waiting.reason == (
        "Slurm resumed train-2 for jobs pending for lack of nodes; none can be added now (no free node of "
        "its instance type on the cluster's fabric): the jobs wait, and are requeued if the nodes are not "
        "up within Slurm's ResumeTimeout")
    down = autoscaler.decide(scaling, runs, [], free_nodes=0, now=EPOCH,
                             power=PowerRequests(suspend=("train-1", "train-0")))
    assert down is not None and (down.node_count, down.remove) == (1, ("train-0",))  # min_nodes 1
    assert "SuspendProgram" in down.reason
    # Nothing asked: nothing done, even with nodes idle for an hour (Slurm gives idle nodes back itself;
    # the queue rule would race it). Without the capability, the queue rule: one goes, min_nodes 1.
    later = EPOCH + dt.timedelta(hours=1)
    assert autoscaler.decide(scaling, runs, [], free_nodes=0, now=later, power=PowerRequests()) is None
    idle = autoscaler.decide(scaling, runs, [], free_nodes=0, now=later)
    assert idle is not None and idle.node_count == 1 and "had no job" in idle.reason
