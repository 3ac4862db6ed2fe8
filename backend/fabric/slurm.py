"""Slurm configuration generated from a cluster's real placement (Slurm 22.05-compatible).

One NodeName line per scalable unit (nodes of one SU share a feature, so jobs can ask for one SU),
`gres.conf` binding GPUs 0-3 / 4-7 to the cores of their NUMA socket, and `topology.conf` for the tree
plugin. The rail-optimized fabric gives every node one leaf per rail inside its SU; Slurm's tree model
wants one parent switch per node, so each SU's rail leaves appear as one switch `<fabric>-suNN`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backend.fabric.layout import ClusterLayout, NodeLayout, hostlist

OS_MEMORY_RESERVE = 0.05  # leave ~5 % of RAM to the OS
_SIZE_UNITS_MIB = {"TB": 10**12 / 2**20, "TiB": 2**20, "GB": 10**9 / 2**20, "GiB": 2**10}


@dataclass(frozen=True)
class SlurmHost:
    """What the machines under the daemons provide. The defaults are the datacenter's GPU servers;
    a driver whose nodes differ (no GPUs, no delegated cgroup tree, fewer cores and less memory than
    the shape sold) says so here and the generator writes the matching lines: there is one generator."""

    # Slurm 22.05 drops a GPU without a device file ("Removing file-less GPU"): nodes without GPUs
    # get stand-in character devices (major 195, never opened) in a directory of their own.
    gpu_device_dir: str = "/dev"
    cgroups: bool = True  # slurmd owns a cgroup tree: track and constrain jobs with it
    # The host may run without systemd: on cgroup v2, slurmd 22.05 asks systemd over dbus for its steps'
    # scope and fails to start when none answers; allowed to, it makes the scope itself (under
    # /sys/fs/cgroup/system.slice, which must exist) and enables the controllers it needs.
    systemd_optional: bool = False
    shape_from_config: bool = False  # the host is smaller than the shape sold: trust slurm.conf's shape
    health_check_program: str | None = "/usr/sbin/nhc"  # NHC with its DCGM check on real GPU servers
    state_dir: str = "/var/lib/slurm"  # Debian's packages create slurmctld/ and slurmd/ here
    log_dir: str = "/var/log/slurm"  # daemons log to files: there is no syslog on every host
    run_dir: str = "/run"
    # slurmdbd, with a MariaDB of its own, runs on the controller: job history (sacct, sreport), QoS,
    # fair share and the cluster's user as a Slurm administrator. slurmctld needs it up at its first start.
    accounting: bool = True
    # Job credentials' lifetime (AuthInfo=cred_expire): also how long a requeued job waits before it may
    # start again (Slurm's default 120 s). Shorter, a job requeued by a repair resumes sooner; long enough
    # to load the user's environment and run the prolog on a busy node.
    cred_expire_seconds: int = 60


DATACENTER = SlurmHost()


@dataclass(frozen=True)
class NodeShape:
    """A machine's own CPUs and memory where they are not the shape sold: a server of a host pool, as its
    check read them. Slurm then schedules what the server has (one NodeName line per distinct shape). Where
    the check read its CPU layout, the line says it (sockets, cores, threads) and gres.conf binds each GPU to
    the cores of its NUMA node (`gpu_cores`, by GPU index, when the check found them for every GPU)."""

    cpus: int
    memory_mib: int
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    gpu_cores: tuple[str, ...] = ()  # Slurm core ranges, GPU 0 first

    @property
    def layout(self) -> str:
        """The node line's CPU layout, or "" when unknown or not adding up to `cpus`."""
        sockets, cores, threads = self.sockets, self.cores_per_socket, self.threads_per_core
        if sockets is None or cores is None or threads is None or sockets * cores * threads != self.cpus:
            return ""
        return f" Boards=1 SocketsPerBoard={sockets} CoresPerSocket={cores} ThreadsPerCore={threads}"

    @property
    def real_memory(self) -> int:
        return int(self.memory_mib * (1 - OS_MEMORY_RESERVE))


@dataclass(frozen=True)
class PowerSaving:
    """An autoscaled cluster the Slurm way: every node name up to max_nodes is declared, those with no
    machine yet as `State=CLOUD`; slurmctld asks for them with `ResumeProgram` when a job needs them and
    gives idle ones back with `SuspendProgram` (docs/engine.md, "Autoscaling")."""

    cloud_nodes: tuple[str, ...]  # declared names with no machine (yet): State=CLOUD, powered down
    min_nodes: int  # SuspendExcNodes=<all>:<min_nodes>: Slurm never powers down below it
    suspend_time: int  # seconds idle before SuspendProgram (scale_down_idle_minutes)
    resume_program: str
    suspend_program: str
    resume_timeout: int = 600  # a resumed node not registered by then goes DOWN (its job is requeued)
    suspend_timeout: int = 120
SLURMDBD_PORT = 6819
# Slurm 22.05 writes a container step's config.json before its tasks' own variables exist (SLURM_PROCID,
# PMIx's, CUDA_VISIBLE_DEVICES); this task prolog, run in every task with them, hands them to the
# container runtime (`backend/provisioning/node_config/containers.py` installs both).
CONTAINER_TASK_PROLOG = "/etc/slurm/gpucloud-task-prolog"
# Fair share counts most, then QoS; a job's age, size and partition break ties (priority/multifactor).
PRIORITY_WEIGHTS = {"Fairshare": 10000, "QOS": 5000, "Age": 1000, "JobSize": 1000, "Partition": 1000}


def cluster_name(layout: ClusterLayout) -> str:
    """Slurm's name of the cluster (ClusterName, the accounting database's key): lower case, no dashes."""
    return layout.name.replace("-", "_").lower()


def _by_unit(layout: ClusterLayout) -> dict[int, list[NodeLayout]]:
    units: dict[int, list[NodeLayout]] = defaultdict(list)
    for node in sorted(layout.nodes, key=lambda n: n.index):
        units[node.scalable_unit].append(node)
    return dict(sorted(units.items()))


def _tmp_disk_mib(local_nvme: str) -> int:
    """Slurm's TmpDisk from the catalog's local NVMe ("8 x 3.84 TB", "2.75 TiB"); 0 when unknown."""
    match = re.fullmatch(r"\s*(?:(\d+)\s*x\s*)?([\d.]+)\s*(TB|TiB|GB|GiB)\s*", local_nvme)
    if match is None:
        return 0
    count = int(match.group(1) or 1)
    return int(count * float(match.group(2)) * _SIZE_UNITS_MIB[match.group(3)])


def slurm_conf(layout: ClusterLayout, host: SlurmHost = DATACENTER,
               config: Mapping[str, Any] | None = None, power: PowerSaving | None = None,
               controller_hostname: str | None = None, shapes: Mapping[str, NodeShape] | None = None) -> str:
    """`config`: the cluster's declared `slurm_config` (partitions, prolog, epilog; QoS live in slurmdbd).
    `controller_hostname`: the controller machine's own `hostname -s` when it is not the node's name (a
    pool's server keeps its name; slurmctld runs only where SlurmctldHost names the machine).
    `shapes`: nodes whose machine is not the catalog's shape (`NodeShape`), by name."""
    itype = layout.instance_type
    real_memory = int(itype.ram_gib * 1024 * (1 - OS_MEMORY_RESERVE))
    gres = f"gpu:{itype.gpu_short_name}:{itype.gpu_count}"
    shapes = shapes or {}
    lines = [
        f"# slurm.conf for cluster {layout.name} ({layout.cluster_id}); generated, do not edit.",
        f"ClusterName={cluster_name(layout)}",
        f"SlurmctldHost={controller_hostname or layout.controller}({layout.controller_ip})",
        "AuthType=auth/munge",
        f"AuthInfo=cred_expire={host.cred_expire_seconds}",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        f"StateSaveLocation={host.state_dir}/slurmctld",
        f"SlurmdSpoolDir={host.state_dir}/slurmd",
        f"SlurmctldPidFile={host.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={host.run_dir}/slurmd.pid",
        f"SlurmctldLogFile={host.log_dir}/slurmctld.log",
        f"SlurmdLogFile={host.log_dir}/slurmd.log",
        # Finished jobs are also kept in this file (the API's job list reads it), see docs/engine.md.
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={host.log_dir}/jobcomp.log",
        "ProctrackType=proctrack/cgroup" if host.cgroups else "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity,task/cgroup" if host.cgroups else "TaskPlugin=task/affinity",
        "PrologFlags=Alloc,Contain" if host.cgroups else "PrologFlags=Alloc",
        "SchedulerType=sched/backfill",
        # Backfill looks a week ahead at 5-minute resolution and keeps going after a lock release.
        "SchedulerParameters=bf_continue,bf_window=10080,bf_resolution=300",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "EnforcePartLimits=ALL",
        "ReturnToService=2",
        "MpiDefault=pmix",
        # NCCL over InfiniBand pins memory: never pass the submit shell's `ulimit -l` to the job.
        "PropagateResourceLimitsExcept=MEMLOCK",
        "KillOnBadExit=1",
        "UnkillableStepTimeout=180",
        "MailProg=/bin/true",
        "SlurmctldTimeout=120",
        "SlurmdTimeout=300",
        "JobRequeue=1",  # batch jobs of a failed node are requeued (the default, said out loud)
        f"TaskProlog={CONTAINER_TASK_PROLOG}",
    ]
    if host.accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={layout.controller_ip}",
            f"AccountingStoragePort={SLURMDBD_PORT}",
            "AccountingStorageTRES=gres/gpu",
            # Jobs run under an association (user, account) and its QoS and limits.
            "AccountingStorageEnforce=associations,limits,qos",
            f"JobAcctGatherType=jobacct_gather/{'cgroup' if host.cgroups else 'linux'}",
            "JobAcctGatherFrequency=30",
            "PriorityType=priority/multifactor",
            "PriorityDecayHalfLife=7-0",
            "PriorityMaxAge=7-0",
            *(f"PriorityWeight{factor}={weight}" for factor, weight in PRIORITY_WEIGHTS.items()),
        ]
    if host.health_check_program:
        lines += [f"HealthCheckProgram={host.health_check_program}", "HealthCheckInterval=300"]
    if host.shape_from_config:
        lines.append("SlurmdParameters=config_overrides")
    for key in ("prolog", "epilog"):  # scripts on a shared volume of the cluster, run by slurmd as root
        if (config or {}).get(key):
            lines.append(f"{key.capitalize()}={(config or {})[key]}")
    if power is not None:
        lines += _power_lines(layout, power)
    if layout.interconnect != "ethernet" and len(layout.nodes) + len(power.cloud_nodes if power else ()) > 1:
        lines.append("TopologyPlugin=topology/tree")
    lines.append("")
    for unit, nodes in _by_unit(layout).items():
        sold = [n for n in nodes if n.name not in shapes]
        if sold:
            lines.append(
                f"NodeName={hostlist(n.name for n in sold)} CPUs={itype.vcpu} Boards=1 "
                f"SocketsPerBoard={itype.sockets} CoresPerSocket={itype.cores_per_socket} "
                f"ThreadsPerCore={itype.threads_per_core} RealMemory={real_memory} "
                f"TmpDisk={_tmp_disk_mib(itype.local_nvme)} Gres={gres} "
                f"Feature={layout.fabric.name},su{unit:02d} State=UNKNOWN"
            )
        for shape in sorted({shapes[n.name] for n in nodes if n.name in shapes}, key=str):
            lines.append(
                f"NodeName={hostlist(n.name for n in nodes if shapes.get(n.name) == shape)} "
                f"CPUs={shape.cpus}{shape.layout} RealMemory={shape.real_memory} Gres={gres} "
                f"Feature={layout.fabric.name},su{unit:02d} State=UNKNOWN"
            )
    cloud = _cloud(layout, power)
    if cloud:  # no machine yet, so no scalable unit: the fabric's feature only
        lines.append(
            f"NodeName={hostlist(cloud)} CPUs={itype.vcpu} Boards=1 "
            f"SocketsPerBoard={itype.sockets} CoresPerSocket={itype.cores_per_socket} "
            f"ThreadsPerCore={itype.threads_per_core} RealMemory={real_memory} "
            f"TmpDisk={_tmp_disk_mib(itype.local_nvme)} Gres={gres} "
            f"Feature={layout.fabric.name} State=CLOUD"
        )
    declared = [n.name for n in layout.nodes] + list(cloud)
    all_nodes = hostlist(declared) if declared else ""
    if all_nodes:
        # Per-GPU defaults so a 1-GPU job takes 1/8 of the node, memory per CPU so a job without GPUs
        # takes its share of the memory (not the whole node's), and finite times so backfill works.
        # The user's partitions (`slurm_config`) take every node too, with their own times; one of them
        # may be the default instead of `gpu`.
        partitions = list((config or {}).get("partitions") or [])
        gpu_default = "NO" if any(p.get("default") for p in partitions) else "YES"
        # Sized for the smallest machine, so a default job fits on every node.
        cpus = min([itype.vcpu, *(shape.cpus for shape in shapes.values())])
        memory = min([real_memory, *(shape.real_memory for shape in shapes.values())])
        cpu_per_gpu = f"DefCpuPerGPU={cpus // itype.gpu_count} " if cpus >= itype.gpu_count else ""
        per_gpu = (f"{cpu_per_gpu}DefMemPerCPU={memory // cpus} DefMemPerGPU={memory // itype.gpu_count} "
                   "OverSubscribe=NO State=UP")
        lines.append(
            f"PartitionName=gpu Nodes={all_nodes} Default={gpu_default} DefaultTime=01:00:00 "
            f"MaxTime=7-00:00:00 {per_gpu}"
        )
        for part in partitions:
            default = "YES" if part.get("default") else "NO"
            lines.append(
                f"PartitionName={part['name']} Nodes={all_nodes} Default={default} "
                f"DefaultTime={slurm_minutes(int(part['default_time_minutes']))} "
                f"MaxTime={slurm_minutes(int(part['max_time_minutes']))} {per_gpu}"
            )
    return "\n".join(lines) + "\n"


# Lines `scontrol reconfigure` applies to a running slurmctld (22.05): partitions, prolog and epilog.
# Any other change (the node list above all) needs slurmctld restarted.
RECONFIGURABLE = ("PartitionName=", "Prolog=", "Epilog=")


def restart_part(conf: str) -> str:
    """The part of a slurm.conf that only a slurmctld restart applies (its other lines reconfigure).
    Of the NodeName lines, the declared names and shapes: an elastic cluster's node joining or leaving
    moves its name between a scalable unit's line and the CLOUD line (State, Feature), which
    `scontrol reconfigure` applies while slurmctld keeps the node's power state (a restart would not)."""
    lines = [line for line in conf.splitlines() if not line.startswith(RECONFIGURABLE)]
    nodes = [line for line in lines if line.startswith("NodeName=")]
    return "\n".join([line for line in lines if not line.startswith("NodeName=")] + _node_part(nodes))


def _node_part(lines: list[str]) -> list[str]:
    names: set[str] = set()
    shapes: set[str] = set()
    for line in lines:
        first, *rest = line.split()
        names |= _expand(first.removeprefix("NodeName="))
        shapes.add(" ".join(token for token in rest if not token.startswith(("Feature=", "State="))))
    return [f"# nodes {','.join(sorted(names))}", *sorted(shapes)] if lines else []


def _expand(expression: str) -> set[str]:
    """The names of a hostlist expression (`train-[0-2,5]`)."""
    names: set[str] = set()
    for part in re.split(r",(?![^\[]*\])", expression):
        found = re.fullmatch(r"(.*)\[([\d,-]+)\]", part)
        if found is None:
            names.update([part] if part else [])
            continue
        for span in found.group(2).split(","):
            low, _, high = span.partition("-")
            names.update(f"{found.group(1)}{i}" for i in range(int(low), int(high or low) + 1))
    return names


def slurm_minutes(minutes: int) -> str:
    """Minutes as a Slurm time: `days-hours:minutes:00`, or `hours:minutes:00` under a day."""
    days, rest = divmod(minutes, 24 * 60)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def _cloud(layout: ClusterLayout, power: PowerSaving | None) -> tuple[str, ...]:
    """The CLOUD names, never a member's (a name declared twice stops slurmctld)."""
    members = {n.name for n in layout.nodes}
    return () if power is None else tuple(name for name in power.cloud_nodes if name not in members)


def _power_lines(layout: ClusterLayout, power: PowerSaving) -> list[str]:
    """Slurm's power saving over every declared node: at least `min_nodes` of them stay up."""
    names = hostlist([n.name for n in layout.nodes] + list(_cloud(layout, power)))
    return [
        f"ResumeProgram={power.resume_program}",
        f"SuspendProgram={power.suspend_program}",
        f"SuspendTime={power.suspend_time}",
        f"ResumeTimeout={power.resume_timeout}",
        f"SuspendTimeout={power.suspend_timeout}",
        f"SuspendExcNodes={names}:{power.min_nodes}",
        # A registering cloud node's address is the one it registers from (no DNS); a node given back
        # (or DOWN after a resume that timed out) is idle again, ready to be asked for; `sinfo` shows the
        # powered-down nodes to the cluster's user.
        "SlurmctldParameters=cloud_reg_addrs,idle_on_node_suspend",
        "PrivateData=cloud",
    ]


def slurmdbd_conf(cluster: str, host: SlurmHost = DATACENTER) -> str:
    """slurmdbd's file, on the controller only (mode 0600, owned by SlurmUser: slurmdbd refuses others).
    MariaDB runs beside it, reached over its local socket as the `slurm` user (unix_socket
    authentication): no password is kept anywhere."""
    lines = [
        f"# slurmdbd.conf of Slurm cluster {cluster}; generated, do not edit.",
        "AuthType=auth/munge",
        "DbdHost=localhost",
        f"DbdPort={SLURMDBD_PORT}",
        "SlurmUser=slurm",
        f"LogFile={host.log_dir}/slurmdbd.log",
        f"PidFile={host.run_dir}/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageUser=slurm",
        "StorageLoc=slurm_acct_db",
        "DefaultQOS=normal",  # slurmdbd makes the `normal` QoS; a new cluster's associations get it
    ]
    return "\n".join(lines) + "\n"


def gres_conf(layout: ClusterLayout, host: SlurmHost = DATACENTER,
              shapes: Mapping[str, NodeShape] | None = None) -> str:
    """The GPUs' device files, bound to the cores of their socket on the shape sold; on a machine of its own
    shape (`shapes`) to the cores of their NUMA node where its check found them, unbound otherwise."""
    itype = layout.instance_type
    lines = [f"# gres.conf for cluster {layout.name}; generated, do not edit.", "AutoDetect=off"]
    stem = f"{host.gpu_device_dir}/nvidia"
    shapes = shapes or {}
    # Each GPU with its NUMA node's cores where the server's check read them all, else unbound.
    own = {n.name: shapes[n.name] for n in layout.nodes if n.name in shapes}
    bound = {name: shape.gpu_cores for name, shape in own.items()
             if shape.layout and len(shape.gpu_cores) == itype.gpu_count}
    for gpu_cores in sorted(set(bound.values())):
        names = hostlist(name for name, its in bound.items() if its == gpu_cores)
        lines += [f"NodeName={names} Name=gpu Type={itype.gpu_short_name} File={stem}{index} Cores={cores}"
                  for index, cores in enumerate(gpu_cores)]
    unbound = [name for name in own if name not in bound]
    if unbound:
        devices = f"{stem}0" if itype.gpu_count == 1 else f"{stem}[0-{itype.gpu_count - 1}]"
        lines.append(f"NodeName={hostlist(unbound)} Name=gpu Type={itype.gpu_short_name} File={devices}")
    sold = [n for n in layout.nodes if n.name not in shapes]
    if not sold:
        return "\n".join(lines) + "\n"
    names = hostlist(n.name for n in sold)
    per_socket = max(1, itype.gpu_count // itype.sockets)
    for socket in range(itype.sockets if itype.gpu_count >= itype.sockets else 1):
        first, last = socket * per_socket, min(itype.gpu_count, (socket + 1) * per_socket) - 1
        cores_first = socket * itype.cores_per_socket
        cores_last = cores_first + itype.cores_per_socket - 1
        devices = f"{stem}{first}" if first == last else f"{stem}[{first}-{last}]"
        lines.append(f"NodeName={names} Name=gpu Type={itype.gpu_short_name} File={devices} "
                     f"Cores={cores_first}-{cores_last}")
    return "\n".join(lines) + "\n"


def cgroup_conf(layout: ClusterLayout, host: SlurmHost = DATACENTER) -> str:
    """Without this file every job step fails on 22.05 ("cgroup namespace 'freezer' not mounted")."""
    lines = [f"# cgroup.conf for cluster {layout.name}; generated, do not edit.", "CgroupPlugin=autodetect"]
    if host.cgroups:
        lines += [f"Constrain{what}=yes" for what in ("Cores", "RAMSpace", "SwapSpace", "Devices")]
    if host.systemd_optional:
        lines += ["IgnoreSystemdOnFailure=yes", "CgroupAutomount=yes"]
    return "\n".join(lines) + "\n"


def topology_conf(layout: ClusterLayout, cloud_nodes: tuple[str, ...] = ()) -> str:
    """`cloud_nodes`: declared names with no machine yet (power saving), under a switch of their own
    until they are placed (a node not under any switch could not take a multi-node job)."""
    lines = [f"# topology.conf for cluster {layout.name}: fabric {layout.fabric.name}, "
             f"{layout.fabric.kind}; one switch per scalable unit (its rail leaves) under the spines."]
    units = _by_unit(layout)
    switch_names = []
    for unit, nodes in units.items():
        switch = f"{layout.fabric.name}-su{unit:02d}"
        switch_names.append(switch)
        lines.append(f"SwitchName={switch} Nodes={hostlist(n.name for n in nodes)}")
    members = {n.name for n in layout.nodes}
    if cloud := [name for name in cloud_nodes if name not in members]:
        switch_names.append(f"{layout.fabric.name}-cloud")
        lines.append(f"SwitchName={switch_names[-1]} Nodes={hostlist(cloud)}")
    if switch_names:
        lines.append(f"SwitchName={layout.fabric.name}-spines Switches={','.join(switch_names)}")
    return "\n".join(lines) + "\n"


def hosts_file(layout: ClusterLayout) -> str:
    """/etc/hosts entries so Slurm's node names resolve without DNS."""
    lines = [f"# hosts of cluster {layout.name}"]
    if layout.jumphost_ip:
        lines.append(f"{layout.jumphost_ip}\t{layout.name}-jumphost")
    for node in sorted(layout.nodes, key=lambda n: n.index):
        lines.append(f"{node.private_ip}\t{node.name}")
    return "\n".join(lines) + "\n"
