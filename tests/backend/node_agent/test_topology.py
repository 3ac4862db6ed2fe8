"""The CPU layout and the GPUs' cores from a sysfs tree built here (two sockets, two cores each, two threads
per core, numbered the way Linux interleaves sockets; one GPU per NUMA node)."""

from __future__ import annotations

from pathlib import Path

from backend.node_agent.topology import CpuLayout, parse_cpu_list, read_cpu_layout, slurm_range

# CPU -> (package, core_id): CPUs alternate sockets, and CPUs 4-7 are the second threads of 0-3.
TWO_SOCKETS = {0: (0, 0), 1: (1, 0), 2: (0, 4), 3: (1, 4), 4: (0, 0), 5: (1, 0), 6: (0, 4), 7: (1, 4)}


def sysfs(root: Path, cpus: dict[int, tuple[int, int]], numa: dict[int, str],
          devices: dict[str, int]) -> Path:
    cpu_dir = root / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text(slurm_range(sorted(cpus)) + "\n")
    for cpu, (package, core) in cpus.items():
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    node_dir = root / "devices" / "system" / "node"
    node_dir.mkdir(parents=True)
    (node_dir / "online").write_text(slurm_range(sorted(numa)) + "\n")
    for node, cpulist in numa.items():
        (node_dir / f"node{node}").mkdir()
        (node_dir / f"node{node}" / "cpulist").write_text(cpulist + "\n")
    for device, node in devices.items():
        (root / "bus" / "pci" / "devices" / device).mkdir(parents=True)
        (root / "bus" / "pci" / "devices" / device / "numa_node").write_text(f"{node}\n")
    return root


def test_each_gpu_gets_the_logical_cores_of_its_numa_node_socket_by_socket(tmp_path: Path) -> None:
    root = sysfs(tmp_path, TWO_SOCKETS, {0: "0,2,4,6", 1: "1,3,5,7"},
                 {"0000:07:00.0": 0, "0000:8a:00.0": 1, "0000:0b:00.0": -1})
    layout = read_cpu_layout(("00000000:07:00.0", "00000000:8A:00.0", "00000000:0B:00.0", "00000000:C1:00.0"),
                             root)
    # Socket 0's cores are logical cores 0-1 (its first CPUs are 0 and 2), socket 1's are 2-3; a GPU whose
    # NUMA node the kernel does not know (-1) or that sysfs lacks gets none.
    assert layout == CpuLayout(sockets=2, cores_per_socket=2, threads_per_core=2,
                               gpu_cores={"00000000:07:00.0": "0-1", "00000000:8A:00.0": "2-3"})


def test_on_one_numa_node_every_gpu_is_near_every_core(tmp_path: Path) -> None:
    root = sysfs(tmp_path, {0: (0, 0), 1: (0, 1)}, {0: "0-1"}, {})
    layout = read_cpu_layout(("00000000:07:00.0",), root)
    assert layout == CpuLayout(1, 2, 1, {"00000000:07:00.0": "0-1"})


def test_a_layout_slurm_cannot_say_is_not_reported(tmp_path: Path) -> None:
    uneven = {0: (0, 0), 1: (0, 1), 2: (1, 0)}  # two cores on one socket, one on the other
    assert read_cpu_layout((), sysfs(tmp_path / "uneven", uneven, {0: "0-2"}, {})) is None
    assert read_cpu_layout((), tmp_path / "nothing") is None


def test_cpu_lists_and_ranges() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert slurm_range([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
