"""Day-2 reads of local nodes: the Slurm job table, the daemons' logs and the node agent's readings.

Every read goes over the node's shell (SSH), as from any server. Jobs: the queue and the jobs slurmctld
still holds come from `squeue --json` (Slurm 22.05's openapi v0.0.38 shape) run on the controller; the
last day's from accounting (`sacct`) where slurmdbd keeps it, else from the `jobcomp/filetxt` file
slurmctld appends to (`JobCompLoc`, the controller's log directory). States are Slurm's own (RUNNING,
PENDING, COMPLETING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...), GPUs a job's total over its nodes,
array tasks carry their array's id. Logs: the files the daemons write in the node's log directory.
Readings: the node agent run by the node's own `python3` (its code on standard input), which reports
what is there (no NVIDIA driver: no GPU numbers, and says so; host CPU and memory).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from backend import node_agent
from backend.node_agent.host import HostReading
from backend.node_agent.links import LinkReading
from backend.node_agent.nvidia import GpuReading
from backend.provisioning.driver import Job, NodeTelemetry, Partition
from backend.provisioning.drivers.local.node_setup import KERNEL_LOG, KERNEL_LOG_COMMAND
from backend.provisioning.node_config.configure import read_health
from backend.provisioning.node_config.shell import NodeCommandError, NodeShell

AGENT_TIMEOUT_SECONDS = 20.0
SLURM_LOGS = "/var/log/slurm"
JOBCOMP_LINES = 5000  # finished jobs read back from the jobcomp file (it grows forever)
_KEY_VALUE = re.compile(r"(\w+)=(.*?)(?= \w+=|\s*$)")
_NOT_USABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING")  # node state flags: no GPU of it is offered
_GPUS = re.compile(r"gpu(?::[\w.-]+)?[:=](\d+)")
_NO_VAL = 0xFFFFFFFE  # Slurm's "no value" for a 32-bit field (openapi prints some as this number)
_ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING")


def _fields(line: str) -> dict[str, str]:
    """Slurm's `Key=value Key=value` line (values may hold spaces; scontrol pads some with two)."""
    return {key: value.strip() for key, value in _KEY_VALUE.findall(line)}


def _epoch(value: Any) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(value, dt.UTC) if isinstance(value, int) and value > 0 else None


def _slurm_time(value: str) -> dt.datetime | None:
    """Slurm writes local wall time without a zone (`2026-11-26T07:08:13`); read it as this host's."""
    try:
        return dt.datetime.fromisoformat(value).astimezone(dt.UTC)
    except ValueError:
        return None


def _limit(minutes: Any) -> dt.timedelta:
    """Slurm's time limit in minutes (`UNLIMITED`, or 0, reads as no limit: 0 s)."""
    try:
        return dt.timedelta(minutes=int(minutes))
    except (TypeError, ValueError):
        return dt.timedelta(0)


def _gpus(*tres: str) -> int:
    """GPUs of a job from Slurm's TRES strings (`gres:gpu:2`, `gres/gpu=2`, `gres:gpu:h100:2`)."""
    for text in tres:
        found = _GPUS.search(text or "")
        if found is not None:
            return int(found[1])
    return 0


def _count(value: Any) -> int:
    """Slurm's node count (a number, or {"number": n} in later openapi versions), at least 1."""
    if isinstance(value, dict):
        value = value.get("number")
    return value if isinstance(value, int) and value > 0 else 1


def _state(raw: str) -> str:
    """Slurm's job state as it prints it, upper case, without what follows (sacct's `CANCELLED by 1000`)."""
    return raw.strip().split(" ", 1)[0].upper() or "UNKNOWN"


def _reason(raw: Any) -> str | None:
    """Slurm's reason (`Resources`, `Priority`, `NonZeroExitCode`); its `None` is none."""
    return None if raw in (None, "", "None", "(null)") else str(raw)


def _array_task(value: Any) -> int | None:
    """An openapi array task id: a number, or null/NO_VAL (not one task of an array)."""
    return value if isinstance(value, int) and 0 <= value < _NO_VAL else None


def _array_rest(raw: dict[str, Any]) -> str | None:
    """The tasks an array record stands for that have not started (`array_task_string`, `3-5`, with
    `%2` when the array limits its running tasks), as squeue prints `1234_[3-5]`; None: one task, or
    not an array."""
    tasks = raw.get("array_task_string")
    if _array_task(raw.get("array_task_id")) is not None or not isinstance(tasks, str) or not tasks:
        return None
    return tasks


def _queue_gpus(raw: dict[str, Any], nodes: int) -> int:
    """A queued job's GPUs over all its nodes: what slurmctld allocated or counts as asked
    (`gres/gpu=12` in tres_alloc_str/tres_req_str, with gres/gpu in AccountingStorageTRES), else what the
    job asked: `--gpus` (tres_per_job) is the total, `--gres=gpu:4`/`--gpus-per-node` (tres_per_node) is
    per node, `--gpus-per-task` per task."""
    counted = _gpus(raw.get("tres_alloc_str", ""), raw.get("tres_req_str", ""))
    if counted:
        return counted
    if _gpus(raw.get("tres_per_job", "")):
        return _gpus(raw.get("tres_per_job", ""))
    if _gpus(raw.get("tres_per_node", "")):
        return _gpus(raw.get("tres_per_node", "")) * nodes
    tasks = raw.get("tasks")
    return _gpus(raw.get("tres_per_task", "")) * (tasks if isinstance(tasks, int) and tasks > 0 else 1)


def parse_squeue_json(document: str) -> list[Job]:
    """Jobs in the output of `squeue --json` (Slurm 22.05, openapi v0.0.38): the queue and the jobs
    slurmctld still holds (MinJobAge), array tasks with their array's id (`array_job_id`, 0: none); an
    array's tasks not started yet are one record, the array's own id, with their task list."""
    jobs = []
    for raw in json.loads(document).get("jobs", []):
        submitted = _epoch(raw.get("submit_time")) or dt.datetime.fromtimestamp(0, dt.UTC)
        state = _state(str(raw.get("job_state", "UNKNOWN")))
        nodes = _count(raw.get("node_count"))
        array = raw.get("array_job_id")
        started = _epoch(raw.get("start_time")) if state not in ("PENDING", "REQUEUED") else None
        jobs.append(Job(
            job_id=int(raw["job_id"]), name=str(raw.get("name", "")), user=str(raw.get("user_name", "")),
            partition=str(raw.get("partition", "")), nodes=str(raw.get("nodes", "")),
            gpus=_queue_gpus(raw, nodes), state=state, submitted_at=submitted, started_at=started,
            ended_at=_epoch(raw.get("end_time")) if started is not None and state not in _ACTIVE else None,
            time_limit=_limit(raw.get("time_limit")), priority=int(raw.get("priority") or 0),
            reason=_reason(raw.get("state_reason")), node_count=nodes,
            array_job_id=array if isinstance(array, int) and array > 0 else None,
            array_task_id=_array_task(raw.get("array_task_id")) if isinstance(array, int) and array else None,
            array_tasks=_array_rest(raw) if isinstance(array, int) and array else None,
        ))
    return jobs


def _finished_reason(state: str) -> str | None:
    """The reason slurmctld gives a job that ended so (the jobcomp file does not write it)."""
    return {"FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeDown",
            "OUT_OF_MEMORY": "OutOfMemory"}.get(state)


def parse_jobcomp_lines(lines: Iterable[str]) -> list[Job]:
    """Finished jobs in the lines `jobcomp/filetxt` writes (`JobId=1 UserId=ubuntu(1001) ... Name=x ...
    [ArrayJobId=1 ArrayTaskId=0] DerivedExitCode=0:0 ExitCode=0:0`). Its Tres is the allocation's
    (gres/gpu only where AccountingStorageTRES counts it)."""
    jobs = []
    for line in lines:
        fields = _fields(line)
        if not fields.get("JobId", "").isdigit():
            continue
        state = _state(fields.get("JobState", "UNKNOWN"))
        started, ended = _slurm_time(fields.get("StartTime", "")), _slurm_time(fields.get("EndTime", ""))
        array, task = fields.get("ArrayJobId", ""), fields.get("ArrayTaskId", "")
        jobs.append(Job(
            job_id=int(fields["JobId"]), name=fields.get("Name", ""),
            user=fields.get("UserId", "").split("(", 1)[0], partition=fields.get("Partition", ""),
            nodes=fields.get("NodeList", ""), gpus=_gpus(fields.get("Tres", "")), state=state,
            submitted_at=_slurm_time(fields.get("SubmitTime", "")) or started or dt.datetime.fromtimestamp(
                0, dt.UTC),
            started_at=started, ended_at=ended, time_limit=_limit(fields.get("TimeLimit")), priority=0,
            reason=_finished_reason(state), node_count=_count(_number(fields.get("NodeCnt", ""))),
            array_job_id=int(array) if array.isdigit() and int(array) else None,
            array_task_id=int(task) if array.isdigit() and task.isdigit() else None,
        ))
    return jobs


SACCT_FORMAT = ("JobIDRaw,JobID,JobName,User,Partition,NodeList,AllocTRES,ReqTRES,State,Submit,Start,End,"
                "TimelimitRaw,Priority,Reason,NNodes,ExitCode")
SACCT = ["sacct", "--parsable2", "--noheader", "--allusers", "--starttime", "now-1days",
         f"--format={SACCT_FORMAT}", "-X"]
_SACCT_JOB_ID = re.compile(r"^(\d+)(?:_(\d+)|_\[(.+)\])?$")


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def parse_sacct(output: str) -> list[Job]:
    """Jobs in `sacct --parsable2 --noheader -X --format=SACCT_FORMAT` (Slurm 22.05): accounting's record of
    each allocation, the queue included. JobID `1234_5` is task 5 of array 1234 (`1234_[6-9]`: its tasks
    not started yet, `array_tasks` 6-9), State `CANCELLED by 1000` is CANCELLED, AllocTRES `gres/gpu=12`
    the job's GPUs over all its nodes (ReqTRES while it waits), times `Unknown`/`None` are none."""
    names = SACCT_FORMAT.split(",")
    jobs = []
    for line in output.splitlines():
        values = line.split("|")
        if len(values) != len(names) or not values[0].isdigit():
            continue
        row = dict(zip(names, values, strict=True))
        state = _state(row["State"])
        found = _SACCT_JOB_ID.match(row["JobID"])
        started = _slurm_time(row["Start"]) if state not in ("PENDING", "REQUEUED") else None
        nodes = row["NodeList"]
        jobs.append(Job(
            job_id=int(row["JobIDRaw"]), name=row["JobName"], user=row["User"], partition=row["Partition"],
            nodes="" if nodes in ("None assigned", "(null)") else nodes,
            gpus=_gpus(row["AllocTRES"]) or _gpus(row["ReqTRES"]), state=state,
            submitted_at=_slurm_time(row["Submit"]) or started or dt.datetime.fromtimestamp(0, dt.UTC),
            started_at=started,
            ended_at=_slurm_time(row["End"]) if started is not None and state not in _ACTIVE else None,
            time_limit=_limit(row["TimelimitRaw"]), priority=_number(row["Priority"]) or 0,
            reason=_reason(row["Reason"]), node_count=_count(_number(row["NNodes"])),
            array_job_id=int(found[1]) if found is not None and row["JobID"] != found[1] else None,
            array_task_id=int(found[2]) if found is not None and found[2] else None,
            array_tasks=found[3] if found is not None else None,
        ))
    return jobs


def merge_jobs(queue: Sequence[Job], finished: Sequence[Job]) -> list[Job]:
    """One row per job id, newest first. The queue is slurmctld's word now: a job it holds (running or
    pending again after a requeue, or finished a moment ago) wins over an older record of the same id
    in accounting or the jobcomp file."""
    by_id = {job.job_id: job for job in finished}
    by_id.update({job.job_id: job for job in queue})
    return sorted(by_id.values(), key=lambda j: j.job_id, reverse=True)


def read_history(controller: NodeShell) -> list[Job]:
    """The last day's jobs from accounting (`sacct`, where slurmdbd keeps it), else the jobcomp file
    (accounting disabled or not answering: sacct exits non-zero)."""
    done = controller.run(SACCT, check=False)
    if done.returncode == 0 and "accounting storage is disabled" not in done.stderr.lower():
        return parse_sacct(done.stdout)
    return parse_jobcomp_lines(tail(controller, f"{SLURM_LOGS}/jobcomp.log", JOBCOMP_LINES))


def read_jobs(controller: NodeShell) -> list[Job]:
    """The cluster's jobs from its controller: `squeue --json` and the history (sacct or jobcomp)."""
    done = controller.run(["squeue", "--json"], check=False)
    queue = parse_squeue_json(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    return merge_jobs(queue, read_history(controller))


def parse_partitions(partition_lines: Iterable[str], node_lines: Iterable[str]) -> list[Partition]:
    """Partitions from `scontrol show partition -o` and GPUs per partition from `scontrol -d show node -o`
    (`Gres=gpu:h100:8`, allocated `GresUsed=gpu:h100:1(IDX:0)`; a DOWN or DRAINED node offers none)."""
    total: dict[str, int] = {}
    free: dict[str, int] = {}
    for line in node_lines:
        node = _fields(line)
        if "NodeName" not in node:
            continue
        gpus = _gpus(node.get("Gres", ""))
        allocated = _gpus(node.get("GresUsed", ""), node.get("AllocTRES", ""))
        usable = not any(flag in node.get("State", "") for flag in _NOT_USABLE)
        for partition in node.get("Partitions", "").split(","):
            total[partition] = total.get(partition, 0) + gpus
            free[partition] = free.get(partition, 0) + (max(0, gpus - allocated) if usable else 0)
    found = []
    for line in partition_lines:
        fields = _fields(line)
        name = fields.get("PartitionName")
        if name is None:
            continue
        found.append(Partition(name=name, nodes=int(fields.get("TotalNodes", "0") or 0),
                               gpus_available=free.get(name, 0), gpus_total=total.get(name, 0),
                               default_time=fields.get("DefaultTime", "NONE"),
                               max_time=fields.get("MaxTime", "UNLIMITED"),
                               state=fields.get("State", "UNKNOWN")))
    return found


def slurm_node_states(node_lines: Iterable[str]) -> dict[str, str]:
    """Each node's Slurm state from `scontrol show node -o`, in the API's words: IDLE, MIXED, ALLOCATED
    (`COMPLETING` too), DRAIN (any drain flag), DOWN (down, failing or not responding), else UNKNOWN."""
    states = {}
    for line in node_lines:
        node = _fields(line)
        if "NodeName" not in node:
            continue
        raw = node.get("State", "")
        base = raw.split("+", 1)[0].rstrip("*~#!%$@^-")
        if "DOWN" in raw or "FAIL" in raw or raw.endswith("*") or "NOT_RESPONDING" in raw:
            states[node["NodeName"]] = "DOWN"
        elif "DRAIN" in raw:
            states[node["NodeName"]] = "DRAIN"
        elif base in ("IDLE", "MIXED", "ALLOCATED"):
            states[node["NodeName"]] = base
        elif base == "COMPLETING":
            states[node["NodeName"]] = "ALLOCATED"
        else:
            states[node["NodeName"]] = "UNKNOWN"
    return states


def read_node_states(controller: NodeShell) -> dict[str, str]:
    """Slurm's view of every node of the cluster (empty: slurmctld does not answer)."""
    done = controller.run(["scontrol", "show", "node", "-o"], check=False)
    return slurm_node_states(done.stdout.splitlines()) if done.returncode == 0 else {}


def read_partitions(controller: NodeShell) -> list[Partition] | None:
    """The cluster's partitions from its controller (None: slurmctld does not answer)."""
    partitions = controller.run(["scontrol", "show", "partition", "-o"], check=False)
    nodes = controller.run(["scontrol", "-d", "show", "node", "-o"], check=False)
    if partitions.returncode != 0 or nodes.returncode != 0:
        return None
    return parse_partitions(partitions.stdout.splitlines(), nodes.stdout.splitlines())


def tail(shell: NodeShell, path: str, count: int) -> list[str]:
    """The last `count` lines of a file on the node (none if it does not exist)."""
    return shell.run(["tail", "-n", str(count), path], check=False).stdout.splitlines()


def controller_log(controller: NodeShell, count: int) -> list[str]:
    return tail(controller, f"{SLURM_LOGS}/slurmctld.log", count)


def node_log(node: NodeShell, count: int) -> list[str]:
    """A node's slurmd log with its kernel log's XID lines in slurm's timestamp format, in time order."""
    slurmd = tail(node, f"{SLURM_LOGS}/slurmd.log", count)
    return merge_kernel_lines(slurmd, tail(node, KERNEL_LOG, count), count)


def merge_kernel_lines(slurmd_lines: Sequence[str], kernel_lines: Sequence[str], count: int) -> list[str]:
    """slurmd's lines and the kernel log's (`<ISO time> message`, rendered as slurm logs: local time)."""
    lines = list(slurmd_lines)
    for line in kernel_lines:
        stamp, _, message = line.partition(" ")
        at = _slurm_time(stamp)
        if at is not None:
            local = at.astimezone().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]  # slurm logs local time
            lines.append(f"[{local}] kernel: {message}")
    return sorted(lines, key=lambda line: line[:25])[-count:]  # `[ISO time]` sorts in time order; stable


_AGENT_MODULES = ("nvidia", "xid", "host", "links", "topology")
_AGENT_BOOTSTRAP = """\
import json, sys, types
sources = json.loads({sources!r})
for name in ("backend", "backend.node_agent"):
    package = types.ModuleType(name)
    package.__path__ = []
    sys.modules[name] = package
for short in {modules!r}:
    module = sys.modules["backend.node_agent." + short] = types.ModuleType("backend.node_agent." + short)
    exec(compile(sources[short], "backend/node_agent/" + short + ".py", "exec"), module.__dict__)
main = types.ModuleType("backend.node_agent.__main__")
exec(compile(sources["__main__"], "backend/node_agent/__main__.py", "exec"), main.__dict__)
main.main()
"""


def agent_script() -> str:
    """The node agent as one script for the node's own `python3`: a node has none of the backend's
    files (a local node has its own /tmp, where a checkout or a venv may live), so the code travels along."""
    package = Path(node_agent.__file__).parent
    sources = {name: (package / f"{name}.py").read_text() for name in (*_AGENT_MODULES, "__main__")}
    return _AGENT_BOOTSTRAP.format(sources=json.dumps(sources), modules=_AGENT_MODULES)


def read_telemetry(nodes: Sequence[NodeShell | None], now: dt.datetime) -> list[NodeTelemetry]:
    """The node agent's reading of each node, run on the nodes in parallel (None: the node is gone)."""
    script = agent_script()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        return list(pool.map(lambda node: _reading(node, script, now), nodes))


def _reading(node: NodeShell | None, script: str, now: dt.datetime) -> NodeTelemetry:
    read_at = now.astimezone(dt.UTC).isoformat(timespec="seconds")
    if node is None:
        return NodeTelemetry(read_at=read_at, gpus=None, gpus_unavailable_reason="the node's machine is gone",
                             xid_events=[])
    try:
        # The kernel log's XIDs (the agent reads dmesg only where there are GPUs), then the agent itself.
        events = read_health(node, KERNEL_LOG_COMMAND).xid_events
        done = node.run(["python3", "-"], input=script, check=False, timeout=AGENT_TIMEOUT_SECONDS)
    except NodeCommandError as exc:
        return NodeTelemetry(read_at=read_at, gpus=None, xid_events=[],
                             gpus_unavailable_reason=f"node agent did not answer: {exc}"[:300])
    if done.returncode != 0:
        return NodeTelemetry(read_at=read_at, gpus=None, xid_events=events, gpus_unavailable_reason=(
            f"node agent failed (exit {done.returncode}): {done.stderr.strip()[-200:]}"))
    agent = json.loads(done.stdout)
    gpus = agent["gpus"]
    devices = [GpuReading(**device) for device in gpus["devices"]]  # what nvidia-smi read, if anything
    return NodeTelemetry(read_at=agent["read_at"], gpus=devices or None,
                         gpus_unavailable_reason=None if devices else gpus["unavailable_reason"],
                         xid_events=events, host=HostReading(**agent["host"]),
                         links=LinkReading.from_dict(agent["links"]) if agent.get("links") else None)
