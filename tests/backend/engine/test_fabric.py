"""Placement, partition keys, addressing and the generated Slurm / Kubernetes artifacts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from backend.domain.catalog import default_catalog
from backend.fabric import addressing, kubernetes, slurm
from backend.fabric.layout import ClusterLayout, NodeLayout, hostlist
from backend.fabric.nccl import nccl_env
from backend.fabric.topology import choose_slots, node_network, slot_position
from backend.provisioning import pool_hosts

CATALOG = default_catalog()
IB = CATALOG.fabric("us-east-1", "ib-east-a")
assert IB is not None
H100 = CATALOG.instance_type("8xH100")
assert H100 is not None


def layout(count: int, *, gaps: bool = False, orchestrator: str = "slurm") -> ClusterLayout:
    assert IB is not None and H100 is not None
    slots = choose_slots(IB, "8xH100", range(20), count) or []
    indexes = [i * 2 if gaps else i for i in range(count)]
    nodes = tuple(
        NodeLayout(
            f"train-{i}",
            i,
            s,
            slot_position(IB, "8xH100", s).scalable_unit,
            addressing.worker_address("10.0.4.0/22", i),
        )
        for i, s in zip(indexes, slots, strict=True)
    )
    return ClusterLayout(
        "cls_x",
        "train",
        "us-east-1",
        orchestrator,
        "infiniband",
        H100,
        IB,
        "10.0.4.0/22",
        "0x0001",
        nodes,
        jumphost_ip="10.0.4.4",
        public_ip="198.18.0.1",
    )


def test_placement_fits_in_one_scalable_unit_when_possible() -> None:
    assert IB is not None
    slots = choose_slots(IB, "8xH100", taken=[], count=8)
    assert slots is not None and {s // 32 for s in slots} == {0}
    # SU 0 has 2 free: a 4-node cluster goes to a unit that holds all four.
    slots = choose_slots(IB, "8xH100", taken=range(30), count=4)
    assert slots is not None and {s // 32 for s in slots} == {1}
    # Best fit: the 2 free slots in SU 0 take a 2-node cluster, keeping SU 1 whole.
    assert choose_slots(IB, "8xH100", taken=range(30), count=2) == [30, 31]


def test_placement_spans_fewest_units_and_reports_shortage() -> None:
    assert IB is not None
    slots = choose_slots(IB, "8xH100", taken=[], count=40)
    assert slots is not None and len(set(slots)) == 40 and {s // 32 for s in slots} == {0, 1}
    assert choose_slots(IB, "8xH100", taken=range(250), count=7) is None
    assert choose_slots(IB, "8xH100", taken=[], count=1, preferred_units=[3]) == [96]


def test_node_network_wires_rail_i_to_leaf_i_with_unique_guids() -> None:
    assert IB is not None and H100 is not None
    net = node_network(IB, H100, 33, "0x0001")
    compute = [h for h in net["hcas"] if h["role"] == "compute"]
    assert [h["device"] for h in compute] == [f"mlx5_{i}" for i in range(8)]
    assert [h["leaf"] for h in compute] == [f"ib-east-a-su01-leaf{i}" for i in range(8)]
    assert len(net["hcas"]) == 10  # plus two storage ports, published too
    guids = {h["guid"] for s in range(64) for h in node_network(IB, H100, s, None)["hcas"]}
    assert len(guids) == 640


def test_partition_keys_are_15_bit_unique_and_never_default() -> None:
    used: list[str] = []
    for _ in range(50):
        key = addressing.next_partition_key(used)
        assert key is not None
        used.append(key)
    assert len(set(used)) == 50 and "0x7fff" not in used and "0x0000" not in used
    everything = [addressing.format_pkey(v) for v in range(1, 0x7FFF)]
    assert addressing.next_partition_key(everything) is None
    assert addressing.next_partition_key(everything[:-1]) == "0x7ffe"


def test_subnets_and_addresses() -> None:
    first = addressing.next_subnet("10.0.0.0/8", [])
    assert first == "10.0.0.0/22"
    assert addressing.next_subnet("10.0.0.0/8", [first]) == "10.0.4.0/22"
    assert addressing.worker_address("10.0.4.0/22", 0) == "10.0.4.10"
    assert addressing.jumphost_address("10.0.4.0/22") == "10.0.4.4"
    assert addressing.next_public_address("198.18.0.0/15", ["198.18.0.1"]) == "198.18.0.2"


def test_subnets_skip_blocks_other_fabrics_own() -> None:
    skip = ["10.0.0.0/23", "10.0.4.0/22"]
    assert addressing.next_subnet("10.0.0.0/20", [], skip) == "10.0.8.0/22"
    assert addressing.next_subnet("10.0.0.0/20", ["10.0.8.0/22", "10.0.12.0/22"], skip) is None


def test_hostlist_compresses_ranges() -> None:
    assert hostlist(["c-0", "c-1", "c-3", "c-2", "c-7"]) == "c-[0-3,7]"
    assert hostlist(["c-5"]) == "c-5"


def test_nccl_env_matches_the_reference() -> None:
    assert H100 is not None
    env = nccl_env("infiniband", H100)
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    efa = nccl_env("efa", H100)
    assert efa["FI_PROVIDER"] == "efa" and efa["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert efa["NCCL_PROTO"] == "simple"


def scontrol(conf_dir: Path, *args: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf_dir / "slurm.conf")}
    done = subprocess.run(
        ["scontrol", *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr.lower(), done.stderr
    return done.stdout


@pytest.mark.parametrize(("count", "gaps"), [(1, False), (2, False), (40, False), (5, True)])
def test_slurm_files_parse_with_slurm_22_05(tmp_path: Path, count: int, gaps: bool) -> None:
    cluster = layout(count, gaps=gaps)
    (tmp_path / "slurm.conf").write_text(slurm.slurm_conf(cluster))
    (tmp_path / "gres.conf").write_text(slurm.gres_conf(cluster))
    (tmp_path / "topology.conf").write_text(slurm.topology_conf(cluster))
    (tmp_path / "cgroup.conf").write_text(slurm.cgroup_conf(cluster))
    names = scontrol(tmp_path, "show", "hostnames", hostlist(n.name for n in cluster.nodes)).split()
    assert names == [n.name for n in sorted(cluster.nodes, key=lambda n: n.index)]
    conf = slurm.slurm_conf(cluster)
    assert "Gres=gpu:h100:8" in conf and "SlurmctldHost=train-jumphost(10.0.4.4)" in conf
    assert ("TopologyPlugin=topology/tree" in conf) == (count > 1)
    assert "File=/dev/nvidia[0-3] Cores=0-51" in slurm.gres_conf(cluster)
    assert "File=/dev/nvidia[4-7] Cores=52-103" in slurm.gres_conf(cluster)


def test_slurm_conf_carries_what_a_gpu_cluster_admin_needs() -> None:
    # From running the generated files on real 22.05 daemons (shared reference slurm-real.md).
    conf = slurm.slurm_conf(layout(2))
    for line in (
        "StateSaveLocation=/var/lib/slurm/slurmctld",  # the directory Debian's packages create
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "ProctrackType=proctrack/cgroup",
        "PrologFlags=Alloc,Contain",
        "SchedulerParameters=bf_continue,bf_window=10080,bf_resolution=300",
        "EnforcePartLimits=ALL",
        "MpiDefault=pmix",
        "PropagateResourceLimitsExcept=MEMLOCK",
        "KillOnBadExit=1",
        "UnkillableStepTimeout=180",
        "MailProg=/bin/true",
        "HealthCheckProgram=/usr/sbin/nhc",
        "JobCompType=jobcomp/filetxt",
        "JobRequeue=1",
        "AuthInfo=cred_expire=60",  # a job requeued by a repair starts again a minute later, not two
        # Accounting in slurmdbd on the controller, fair share and QoS in the priority.
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=10.0.4.4",
        "AccountingStoragePort=6819",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStorageEnforce=associations,limits,qos",
        "JobAcctGatherType=jobacct_gather/cgroup",
        "PriorityType=priority/multifactor",
        "PriorityWeightFairshare=10000",
        "PriorityWeightQOS=5000",
    ):
        assert line in conf.splitlines(), line
    # 8 x 3.84 TB of NVMe; a 1-GPU job gets 1/8 of the cores and memory, a job without GPUs the memory of
    # its CPUs (1751040 MiB / 208 vCPUs), and every job a finite time.
    assert "RealMemory=1751040 TmpDisk=29296875 Gres=gpu:h100:8" in conf
    assert ("PartitionName=gpu Nodes=train-[0-1] Default=YES DefaultTime=01:00:00 MaxTime=7-00:00:00 "
            "DefCpuPerGPU=26 DefMemPerCPU=8418 DefMemPerGPU=218880 OverSubscribe=NO State=UP") in conf
    assert "SlurmdParameters" not in conf
    assert slurm.cgroup_conf(layout(2)).splitlines()[1:] == [
        "CgroupPlugin=autodetect", "ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainSwapSpace=yes",
        "ConstrainDevices=yes",
    ]


def test_slurm_files_for_hosts_without_gpus_or_cgroups(tmp_path: Path) -> None:
    host = slurm.SlurmHost(gpu_device_dir="/var/lib/slurm/gpus", cgroups=False, shape_from_config=True,
                           health_check_program=None, run_dir="/run/slurm")
    cluster = layout(2)
    conf = slurm.slurm_conf(cluster, host)

    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/affinity\n" in conf
    assert "JobAcctGatherType=jobacct_gather/linux\n" in conf  # no cgroup tree to read usage from
    assert "PrologFlags=Alloc\n" in conf and "HealthCheck" not in conf
    assert "SlurmdParameters=config_overrides" in conf and "SlurmdPidFile=/run/slurm/slurmd.pid" in conf
    # 22.05 drops file-less GPUs, so the stand-in device files are named, never a bare Count.
    assert "File=/var/lib/slurm/gpus/nvidia[0-3] Cores=0-51" in slurm.gres_conf(cluster, host)
    assert slurm.cgroup_conf(cluster, host).splitlines()[1:] == ["CgroupPlugin=autodetect"]
    (tmp_path / "slurm.conf").write_text(conf)
    (tmp_path / "gres.conf").write_text(slurm.gres_conf(cluster, host))
    (tmp_path / "cgroup.conf").write_text(slurm.cgroup_conf(cluster, host))
    assert scontrol(tmp_path, "show", "hostnames", "train-[0-1]").split() == ["train-0", "train-1"]


def test_cgroup_conf_where_a_host_may_run_without_systemd() -> None:
    # A pool's server on cgroup v2 without systemd: slurmd 22.05 refused to start (no dbus to ask for its
    # steps' scope) until it was allowed to make the scope itself; then GPU jobs ran (a lent H200 server).
    host = slurm.SlurmHost(cgroups=False, systemd_optional=True)
    assert slurm.cgroup_conf(layout(1), host).splitlines()[1:] == [
        "CgroupPlugin=autodetect", "IgnoreSystemdOnFailure=yes", "CgroupAutomount=yes",
    ]


def test_slurm_files_describe_servers_of_their_own_shape(tmp_path: Path) -> None:
    # Servers of a host pool: Slurm is told the CPUs and memory each has (not the shape sold), partitions'
    # defaults fit the smallest, and GPUs are not bound to cores whose layout nobody read.
    cluster = layout(3)
    shapes = {"train-0": slurm.NodeShape(cpus=64, memory_mib=512_000),
              "train-1": slurm.NodeShape(cpus=64, memory_mib=512_000),
              "train-2": slurm.NodeShape(cpus=4, memory_mib=16_000)}
    conf = slurm.slurm_conf(cluster, shapes=shapes)
    nodes = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=train-2 CPUs=4 RealMemory=15200 Gres=gpu:h100:8 Feature=ib-east-a,su00 State=UNKNOWN",
        "NodeName=train-[0-1] CPUs=64 RealMemory=486400 Gres=gpu:h100:8 Feature=ib-east-a,su00 State=UNKNOWN",
    ]
    # 4 CPUs for 8 GPUs: no CPUs per GPU by default (a job gets one per task)
    assert " DefMemPerCPU=3800 DefMemPerGPU=1900 OverSubscribe=NO" in conf and "DefCpuPerGPU" not in conf
    gres = slurm.gres_conf(cluster, shapes=shapes)
    assert gres.splitlines()[2:] == ["NodeName=train-[0-2] Name=gpu Type=h100 File=/dev/nvidia[0-7]"]
    (tmp_path / "slurm.conf").write_text(conf)
    (tmp_path / "gres.conf").write_text(gres)
    (tmp_path / "topology.conf").write_text(slurm.topology_conf(cluster))
    (tmp_path / "cgroup.conf").write_text(slurm.cgroup_conf(cluster))
    assert scontrol(tmp_path, "show", "hostnames", "train-[0-2]").split() == ["train-0", "train-1", "train-2"]


def test_servers_whose_cpu_layout_was_read_bind_each_gpu_to_its_numa_nodes_cores(tmp_path: Path) -> None:
    # Two servers with the layout and every GPU's cores read, one without: the first two get their sockets,
    # cores and threads on the node line and one gres line per GPU; the third stays as before. A layout
    # that does not add up to the CPUs is not said.
    cluster = layout(3)
    halves = ("0-25",) * 4 + ("26-51",) * 4
    read = slurm.NodeShape(cpus=208, memory_mib=512_000, sockets=2, cores_per_socket=52, threads_per_core=2,
                           gpu_cores=halves)
    shapes = {"train-0": read, "train-1": read, "train-2": slurm.NodeShape(cpus=208, memory_mib=512_000)}
    conf = slurm.slurm_conf(cluster, shapes=shapes)
    nodes = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=train-[0-1] CPUs=208 Boards=1 SocketsPerBoard=2 CoresPerSocket=52 ThreadsPerCore=2 "
        "RealMemory=486400 Gres=gpu:h100:8 Feature=ib-east-a,su00 State=UNKNOWN",
        "NodeName=train-2 CPUs=208 RealMemory=486400 Gres=gpu:h100:8 Feature=ib-east-a,su00 State=UNKNOWN",
    ]
    gres = slurm.gres_conf(cluster, shapes=shapes)
    assert gres.splitlines()[2:] == [
        *(f"NodeName=train-[0-1] Name=gpu Type=h100 File=/dev/nvidia{gpu} Cores={cores}"
          for gpu, cores in enumerate(halves)),
        "NodeName=train-2 Name=gpu Type=h100 File=/dev/nvidia[0-7]",
    ]
    not_adding_up = dataclasses.replace(read, cpus=100)
    assert not_adding_up.layout == ""
    assert pool_hosts.node_shape({
        "cpu_count": 208, "memory_mib": 512_000, "sockets": 2, "cores_per_socket": 52, "threads_per_core": 2,
        "gpus": [{"index": gpu, "cores": halves[gpu]} for gpu in reversed(range(8))],
    }) == read
    unknown_gpu = [{"index": 0, "cores": "0-25"}, {"index": 1, "cores": None}]
    unbound = pool_hosts.node_shape({"cpu_count": 8, "memory_mib": 1024, "gpus": unknown_gpu})
    assert unbound == slurm.NodeShape(cpus=8, memory_mib=1024)
    (tmp_path / "slurm.conf").write_text(conf)
    (tmp_path / "gres.conf").write_text(gres)
    (tmp_path / "topology.conf").write_text(slurm.topology_conf(cluster))
    (tmp_path / "cgroup.conf").write_text(slurm.cgroup_conf(cluster))
    assert scontrol(tmp_path, "show", "hostnames", "train-[0-2]").split() == ["train-0", "train-1", "train-2"]


def test_slurmdbd_conf_keeps_no_password_and_names_the_hosts_paths() -> None:
    host = slurm.SlurmHost(log_dir="/var/log/slurm", run_dir="/run/slurm")
    conf = slurm.slurmdbd_conf(slurm.cluster_name(layout(2)), host)
    assert conf.splitlines()[0] == "# slurmdbd.conf of Slurm cluster train; generated, do not edit."
    assert conf.splitlines()[1:] == [
        "AuthType=auth/munge", "DbdHost=localhost", "DbdPort=6819", "SlurmUser=slurm",
        "LogFile=/var/log/slurm/slurmdbd.log", "PidFile=/run/slurm/slurmdbd.pid",
        "StorageType=accounting_storage/mysql", "StorageHost=localhost", "StorageUser=slurm",
        "StorageLoc=slurm_acct_db", "DefaultQOS=normal",
    ]  # MariaDB's unix_socket authentication: no StoragePass


def test_slurm_conf_without_accounting_keeps_the_job_file_only(tmp_path: Path) -> None:
    conf = slurm.slurm_conf(layout(2), slurm.SlurmHost(accounting=False))
    assert "Accounting" not in conf and "Priority" not in conf and "JobAcctGather" not in conf
    assert "JobCompType=jobcomp/filetxt" in conf.splitlines() and "JobRequeue=1" in conf.splitlines()
    (tmp_path / "slurm.conf").write_text(conf)
    assert scontrol(tmp_path, "show", "hostnames", "train-[0-1]").split() == ["train-0", "train-1"]


def test_slurm_cluster_name_is_lower_case_without_dashes() -> None:
    assert slurm.cluster_name(dataclasses.replace(layout(1), name="My-Train")) == "my_train"
    assert "ClusterName=train\n" in slurm.slurm_conf(layout(1))


@pytest.mark.parametrize(
    ("nvme", "mib"),
    [("8 x 3.84 TB", 29296875), ("2.75 TiB", 2883584), ("22 TiB", 23068672), ("480 GB", 457763), ("none", 0)],
)
def test_slurm_tmp_disk_from_the_catalog(nvme: str, mib: int) -> None:
    assert slurm._tmp_disk_mib(nvme) == mib


def test_slurm_topology_reflects_the_placement() -> None:
    # SU 0 is partly taken (slots 0-19), so 40 nodes fill the two whole units 1 and 2.
    topo = slurm.topology_conf(layout(40))
    assert "SwitchName=ib-east-a-su01 Nodes=train-[0-31]" in topo
    assert "SwitchName=ib-east-a-su02 Nodes=train-[32-39]" in topo
    assert "SwitchName=ib-east-a-spines Switches=ib-east-a-su01,ib-east-a-su02" in topo


def test_kubeconfig_loads_with_the_kubernetes_client(tmp_path: Path) -> None:
    cluster = layout(2, orchestrator="kubernetes")
    ca, token = kubernetes.new_control_plane_credentials("train", dt.datetime.now(dt.UTC))
    path = tmp_path / "kubeconfig"
    path.write_text(kubernetes.kubeconfig(cluster, ca, token))
    client_config = kube_client.Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=client_config
    )
    assert client_config.host == "https://198.18.0.1:6443"
    assert client_config.api_key["BearerToken"] == f"Bearer {token}"
    assert Path(str(client_config.ssl_ca_cert)).read_text() == ca


def test_kubernetes_node_objects_carry_gpu_and_fabric_labels() -> None:
    cluster = layout(2, orchestrator="kubernetes")
    nets = {n.name: {"partition_key": "0x0001"} for n in cluster.nodes}
    nodes = kubernetes.node_objects(cluster, nets)
    labels = nodes[0]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.product"].startswith("NVIDIA-H100")
    assert labels["gpucloud.io/fabric"] == "ib-east-a" and labels["gpucloud.io/ib-partition"] == "0x0001"
    assert nodes[0]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert nodes[0]["status"]["capacity"]["rdma/ib"] == "8"
