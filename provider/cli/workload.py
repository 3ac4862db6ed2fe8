"""What runs on a cluster: `gpucloud jobs CLUSTER` (the scheduler's job table, counts per state,
partitions) and `gpucloud logs CLUSTER` (the controller's or a node's log, followed with -f)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import App, complete_cluster, find_cluster, json_option, pass_app
from provider.cli.output import Column, counts_line, emit, note, print_table
from provider.client import GpuCloudClient

# Slurm's job states as the API's `state` filter names them (lower case; the CLI takes either case).
JOB_STATES = [
    "pending", "running", "suspended", "completed", "cancelled", "failed", "timeout", "node_fail",
    "preempted", "boot_fail", "deadline", "out_of_memory", "completing", "configuring", "resizing",
    "requeued", "requeue_fed", "requeue_hold", "special_exit", "stopped", "revoked", "resv_del_hold",
    "signaling", "stage_out", "unknown",
]


def slurm_duration(seconds: int) -> str:
    """As squeue prints times: M:SS, H:MM:SS or D-HH:MM:SS."""
    days, rest = divmod(max(0, int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def job_id(job: Mapping[str, Any]) -> str:
    """As squeue prints it: `1234_5` for task 5 of array job 1234, `1234_[3-5]` for its tasks 3 to 5 that
    have not started (one record in Slurm), else the job's id."""
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    if job.get("array_job_id") is not None and job.get("array_tasks"):
        return f"{job['array_job_id']}_[{job['array_tasks']}]"
    return str(job["job_id"])


JOB_COLUMNS: list[Column] = [
    ("JOBID", job_id), ("NAME", "name"), ("USER", "user"), ("PARTITION", "partition"), ("NODES", "nodes"),
    ("GPUS", "gpus"),
    ("STATE", lambda j: str(j["state"]).upper()),
    ("REASON", "reason"),
    ("RUN TIME", lambda j: slurm_duration(j["run_time_seconds"])),
    ("TIME LIMIT", lambda j: slurm_duration(j["time_limit_seconds"])),
    ("PRIORITY", "priority"),
]
PARTITION_COLUMNS: list[Column] = [
    ("PARTITION", "name"), ("NODES", "nodes"), ("GPU TYPE", "gpu_type"),
    ("GPUS FREE", lambda p: f"{p['gpus_available']}/{p['gpus_total']}"),
    ("DEFAULT TIME", "default_time"), ("MAX TIME", "max_time"), ("STATE", "state"),
]


def show_jobs(listing: Mapping[str, Any], state: str | None) -> None:
    click.echo(counts_line("Jobs", listing.get("counts") or {}))
    click.echo()
    which = f"{state.upper()} " if state else ""
    print_table(JOB_COLUMNS, listing["items"], empty=f"No {which}jobs.")
    if listing.get("partitions"):
        click.echo()
        print_table(PARTITION_COLUMNS, listing["partitions"], empty="")


@click.command()
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.option("--state", type=click.Choice(JOB_STATES, case_sensitive=False), metavar="STATE",
              help="Only jobs in this Slurm state, either case: pending, running, completing, completed, "
                   "failed, cancelled, timeout, node_fail, preempted, requeued, out_of_memory, ... "
                   "(counts cover all).")
@click.option("--limit", type=int, help="At most this many jobs, newest first (default 100).")
@json_option
@pass_app
def jobs(app: App, cluster_ref: str, state: str | None, limit: int | None, as_json: bool) -> None:
    """List CLUSTER's jobs and partitions.

    The Slurm job table (as squeue and sacct show it: Slurm's states, array tasks as 1234_5 and those
    not started yet as 1234_[3-5], a job's GPUs over all its nodes), newest first, after the count of
    jobs per state, then the partitions (nodes, GPU type, free GPUs, time limits).

    \b
    Example:
      gpucloud jobs train
      gpucloud jobs train --state pending
      gpucloud jobs train --state node_fail
    """
    c = find_cluster(app.client, cluster_ref)
    listing = app.client.list_cluster_jobs(c["id"], state=state, limit=limit)
    emit(listing, as_json, lambda body: show_jobs(body, state))


def show_lines(body: Mapping[str, Any]) -> None:
    if not body["lines"]:
        note(f"No lines in the {body['source']} log yet.")
    for line in body["lines"]:
        click.echo(line)


def follow_log(client: GpuCloudClient, cluster_id: str, source: str, tail: int | None, as_json: bool) -> None:
    """Print the tail, then each new line, until Ctrl-C. The server ends a stream after some minutes: it
    is opened again, and the lines it repeats (its tail) are skipped by their leading timestamp."""
    last = ""
    while True:
        shown_before = last
        for line in client.follow_cluster_logs(cluster_id, source=source, tail=tail):
            if shown_before and line <= shown_before:
                continue
            last = line
            click.echo(json.dumps({"source": source, "line": line}) if as_json else line)


@click.command()
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.option("--node", "node_name", metavar="NAME",
              help="This node's log (slurmd, kernel, node agent) instead of the controller's (slurmctld).")
@click.option("--tail", type=int, metavar="N", help="The last N lines (default 100).")
@click.option("-f", "--follow", is_flag=True, help="Then print new lines as they are written, until Ctrl-C.")
@json_option
@pass_app
def logs(
    app: App, cluster_ref: str, node_name: str | None, tail: int | None, follow: bool, as_json: bool
) -> None:
    """Print CLUSTER's controller or node log.

    The last lines of the controller's log (slurmctld), or of one node's, oldest first. With --follow
    and --json, one JSON object per line: {"source": ..., "line": ...}.

    \b
    Example:
      gpucloud logs train --tail 50
      gpucloud logs train --node train-1 -f
    """
    c = find_cluster(app.client, cluster_ref)
    source = node_name or "controller"
    if follow:
        follow_log(app.client, c["id"], source, tail, as_json)
    else:
        emit(app.client.get_cluster_logs(c["id"], source=source, tail=tail), as_json, show_lines)
