"""Slurm configuration generated from a cluster's real placement (Slurm 22.05-compatible).

One NodeName line per scalable unit (nodes of one SU share a feature, so jobs can ask for one SU),
`gres.conf` binding GPUs 0-3 / 4-7 to the cores of their NUMA socket, and `topology.conf` for the tree
plugin. The rail-optimized fabric gives every node one leaf per rail inside its SU; Slurm's tree model
wants one parent switch per node, so each SU's rail leaves appear as one switch `<fabric>-suNN`.
"""

from __future__ import annotations

from collections import defaultdict

from backend.fabric.layout import ClusterLayout, NodeLayout, hostlist

OS_MEMORY_RESERVE = 0.05  # leave ~5 % of RAM to the OS


def _by_unit(layout: ClusterLayout) -> dict[int, list[NodeLayout]]:
    units: dict[int, list[NodeLayout]] = defaultdict(list)
    for node in sorted(layout.nodes, key=lambda n: n.index):
        units[node.scalable_unit].append(node)
    return dict(sorted(units.items()))


def slurm_conf(layout: ClusterLayout) -> str:
    itype = layout.instance_type
    real_memory = int(itype.ram_gib * 1024 * (1 - OS_MEMORY_RESERVE))
    gres = f"gpu:{itype.gpu_short_name}:{itype.gpu_count}"
    lines = [
        f"# slurm.conf for cluster {layout.name} ({layout.cluster_id}); generated, do not edit.",
        f"ClusterName={layout.name.replace('-', '_')}",
        f"SlurmctldHost={layout.controller}({layout.controller_ip})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/affinity,task/cgroup",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "ReturnToService=2",
        "MpiDefault=none",
        "SlurmctldTimeout=120",
        "SlurmdTimeout=300",
    ]
    if layout.interconnect != "ethernet" and len(layout.nodes) > 1:
        lines.append("TopologyPlugin=topology/tree")
    lines.append("")
    for unit, nodes in _by_unit(layout).items():
        lines.append(
            f"NodeName={hostlist(n.name for n in nodes)} CPUs={itype.vcpu} Boards=1 "
            f"SocketsPerBoard={itype.sockets} CoresPerSocket={itype.cores_per_socket} "
            f"ThreadsPerCore={itype.threads_per_core} RealMemory={real_memory} Gres={gres} "
            f"Feature={layout.fabric.name},su{unit:02d} State=UNKNOWN"
        )
    all_nodes = hostlist(n.name for n in layout.nodes) if layout.nodes else ""
    if all_nodes:
        lines.append(f"PartitionName=gpu Nodes={all_nodes} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(layout: ClusterLayout) -> str:
    itype = layout.instance_type
    lines = [f"# gres.conf for cluster {layout.name}; generated, do not edit.", "AutoDetect=off"]
    if not layout.nodes:
        return "\n".join(lines) + "\n"
    names = hostlist(n.name for n in layout.nodes)
    per_socket = max(1, itype.gpu_count // itype.sockets)
    for socket in range(itype.sockets if itype.gpu_count >= itype.sockets else 1):
        first, last = socket * per_socket, min(itype.gpu_count, (socket + 1) * per_socket) - 1
        cores_first = socket * itype.cores_per_socket
        cores_last = cores_first + itype.cores_per_socket - 1
        devices = f"/dev/nvidia{first}" if first == last else f"/dev/nvidia[{first}-{last}]"
        lines.append(f"NodeName={names} Name=gpu Type={itype.gpu_short_name} File={devices} "
                     f"Cores={cores_first}-{cores_last}")
    return "\n".join(lines) + "\n"


def topology_conf(layout: ClusterLayout) -> str:
    lines = [f"# topology.conf for cluster {layout.name}: fabric {layout.fabric.name}, "
             f"{layout.fabric.kind}; one switch per scalable unit (its rail leaves) under the spines."]
    units = _by_unit(layout)
    switch_names = []
    for unit, nodes in units.items():
        switch = f"{layout.fabric.name}-su{unit:02d}"
        switch_names.append(switch)
        lines.append(f"SwitchName={switch} Nodes={hostlist(n.name for n in nodes)}")
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
