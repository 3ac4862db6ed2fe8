"""Elastic Slurm clusters the Slurm way: power saving over every node name up to max_nodes.

An autoscaled Slurm cluster's `slurm.conf` declares the names `<cluster>-0` .. `<cluster>-<max_nodes - 1>`
(the names the engine gives new nodes: the lowest free index); those with no machine are `State=CLOUD`, so
`sbatch -N<max_nodes>` is accepted and slurmctld asks for the nodes it needs. Nodes cannot reach the
backend, so the asking goes through a file: `ResumeProgram` and `SuspendProgram` (run by slurmctld as the
`slurm` user on the controller) append one line per node, `resume <name>` or `suspend <name>`, to
`REQUEST_FILE`, in a directory only `slurm` (and root) may enter. The driver reads the file over the
controller's root shell when the autoscaler asks (`power_requests`), drops the lines the cluster already
satisfies (a resumed name that is a member, a suspended one that is not) and hands the rest to the
autoscaler, which carries them out like its other decisions. A request stays in the file until it is
satisfied, so a backend that dies between reading and acting reads it again.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence

from backend.fabric.slurm import PowerSaving
from backend.provisioning import spot
from backend.provisioning.driver import PowerRequests
from backend.store.engine_models import EngineCluster
from backend.store.models import Cluster

POWER_DIR = "/var/lib/slurm/power"  # on the controller: slurm:slurm 0700
REQUEST_FILE = f"{POWER_DIR}/requests"
RESUME_PROGRAM = "/etc/slurm/gpucloud-resume"
SUSPEND_PROGRAM = "/etc/slurm/gpucloud-suspend"
ACTIONS = ("resume", "suspend")
_LINE = re.compile(r"^(resume|suspend) (\S+)$")


def names(prefix: str, max_nodes: int) -> list[str]:
    """Every name the cluster may have (the engine's `<prefix>-<index>`, index below max_nodes)."""
    return [f"{prefix}-{index}" for index in range(max_nodes)]


def power_saving(prefix: str, members: Iterable[str], *, min_nodes: int, max_nodes: int,
                 idle_minutes: int) -> PowerSaving:
    """The generator's input for one cluster: the names up to max_nodes with no machine are CLOUD."""
    present = set(members)
    return PowerSaving(cloud_nodes=tuple(n for n in names(prefix, max_nodes) if n not in present),
                       min_nodes=min_nodes, suspend_time=max(60, 60 * idle_minutes),
                       resume_program=RESUME_PROGRAM, suspend_program=SUSPEND_PROGRAM)


def for_cluster(cluster: Cluster, state: EngineCluster, members: Iterable[str]) -> PowerSaving | None:
    """The power saving of an autoscaled Slurm cluster, or None. Only with min_nodes >= 2 (so a
    jumphost runs slurmctld from the start): a cluster of one node has slurmctld on that node, and
    growing it moves slurmctld to a new jumphost that starts with an empty queue (a job accepted for the
    new node would be lost). Not for spot clusters either: they take fresh names (indexes beyond
    max_nodes) for every new node."""
    if (cluster.orchestrator != "slurm" or cluster.autoscaling_min_nodes is None
            or cluster.autoscaling_max_nodes is None or cluster.autoscaling_min_nodes < 2
            or state.jumphost_ip is None or spot.uses_spot(cluster)):
        return None
    return power_saving(state.hostname_prefix, members, min_nodes=cluster.autoscaling_min_nodes,
                        max_nodes=cluster.autoscaling_max_nodes,
                        idle_minutes=cluster.autoscaling_idle_minutes or 0)


def program(action: str) -> str:
    """The ResumeProgram / SuspendProgram: one `<action> <name>` line per node of Slurm's hostlist
    argument, appended under the file's lock (the reader rewrites it under the same lock)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown power action {action!r}")
    return (
        "#!/bin/sh\n"
        f"# Slurm's {action.capitalize()}Program for gpucloud; generated, do not edit.\n"
        "# Asks the backend (which reads this file over SSH) to "
        f"{'add' if action == 'resume' else 'remove'} the nodes named in $1.\n"
        "set -e\n"
        "PATH=/usr/bin:/bin\n"
        "umask 077\n"
        f"exec 9>>{REQUEST_FILE}\n"
        "flock 9\n"
        f'scontrol show hostnames "$1" | sed "s/^/{action} /" >&9\n'
    )


def prepare_script() -> str:
    """Root, on the controller: the request directory, slurm's only."""
    return (f"install -d -o slurm -g slurm -m 0700 {POWER_DIR}\n"
            f"touch {REQUEST_FILE} && chown slurm:slurm {REQUEST_FILE} && chmod 0600 {REQUEST_FILE}\n")


READ_SCRIPT = f"[ -f {REQUEST_FILE} ] || exit 0\nflock {REQUEST_FILE} cat {REQUEST_FILE}\n"


def parse(text: str) -> list[tuple[str, str]]:
    """(action, name) per well-formed line, in the order written; other lines are ignored."""
    found = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is not None:
            found.append((match.group(1), match.group(2)))
    return found


def settle(requests: Sequence[tuple[str, str]], members: Iterable[str], allowed: Iterable[str]
           ) -> tuple[PowerRequests, set[str]]:
    """The latest request of each name decides. Answers what is still to do and the names whose
    lines can go: satisfied (resumed and a member, suspended and not) or not a name of the cluster."""
    present, known = set(members), set(allowed)
    latest: dict[str, str] = {}
    for action, name in requests:
        latest.pop(name, None)
        latest[name] = action  # ordered by the latest request
    resume, suspend, done = [], [], set()
    for name, action in latest.items():
        if name not in known:
            done.add(name)
        elif action == "resume" and name not in present:
            resume.append(name)
        elif action == "suspend" and name in present:
            suspend.append(name)
        else:
            done.add(name)
    return PowerRequests(tuple(resume), tuple(suspend)), done


def prune_script(count: int, done: Iterable[str]) -> str:
    """Drop, among the first `count` lines (those read), the lines of the names in `done`; lines
    appended since are kept. Rewritten in place under the lock the programs append under."""
    gone = " ".join(sorted(done))
    awk = ("BEGIN { n = split(gone, g, \" \"); for (i = 1; i <= n; i++) drop[g[i]] = 1 } "
           "NR > count || !($2 in drop)")
    return (f"f={REQUEST_FILE}\n"
            "exec 9<>\"$f\"\nflock 9\n"
            f"kept=$(awk -v count={int(count)} -v gone={shlex.quote(gone)} {shlex.quote(awk)} \"$f\")\n"
            "if [ -n \"$kept\" ]; then printf '%s\\n' \"$kept\" > \"$f\"; else : > \"$f\"; fi\n")
