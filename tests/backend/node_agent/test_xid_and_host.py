"""XID events from kernel-log lines and the node's CPU/memory from /proc."""

from __future__ import annotations

from pathlib import Path

from backend.node_agent.host import read_host
from backend.node_agent.nvidia import parse_nvidia_smi_xml
from backend.node_agent.xid import parse_xid_lines

H200 = parse_nvidia_smi_xml((Path(__file__).parent / "data" / "nvidia-smi-q.xml").read_text())


def test_xid_parse_kernel_log_lines_maps_pci_to_gpu() -> None:
    lines = [
        "2026-11-26T04:40:00,123456+00:00 NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04",
        "2026-11-26T04:41:02,000001+00:00 NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.",
        "[  812.5] NVRM: Xid (PCI:0000:1b:00): 13, pid=77, Graphics Exception: ESR 0x4041b0",
        "NVRM: Xid (PCI:0000:00:06): 999, something new",
    ]

    events = parse_xid_lines(lines, H200.devices)

    assert [(e.code, e.gpu_index, e.hardware) for e in events] == [
        (79, 0, True),
        (13, None, False),
        (999, 0, True),
    ]
    assert events[0].meaning == "GPU has fallen off the bus"
    assert events[0].logged_at == "2026-11-26T04:41:02,000001+00:00"
    assert events[0].detail.startswith("pid=1234")
    assert events[1].logged_at is None
    assert "not in our catalogue" in events[2].meaning


def test_host_reads_proc_and_tolerates_missing_files(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(
        "MemTotal:       24683520 kB\nMemFree: 1 kB\nMemAvailable:   20000000 kB\n"
    )
    (tmp_path / "loadavg").write_text("0.42 0.30 0.20 1/300 4242\n")

    host = read_host(tmp_path)
    empty = read_host(tmp_path / "absent")

    assert (host.memory_total_mib, host.memory_available_mib, host.load_1m) == (24105, 19531, 0.42)
    assert host.cpu_count >= 1
    assert (empty.memory_total_mib, empty.load_1m) == (None, None)
