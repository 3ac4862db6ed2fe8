"""NVLink and InfiniBand link state: `nvidia-smi nvlink -s` output and the kernel's InfiniBand sysfs
tree, and what makes a node degraded."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

from backend.node_agent import __main__ as agent
from backend.node_agent.links import IbPort, LinkReading, parse_nvlink_status, read_infiniband, read_links
from backend.provisioning.driver import NodeTelemetry
from backend.provisioning.node_health import degraded_reason
from tests.backend.node_agent.test_nvidia import H200_XML, _fake_nvidia_smi

# `nvidia-smi nvlink -s` on an HGX H100 board (synthetic: its layout as the driver prints it, one line
# per link with its speed, `<inactive>` for a link that is down); GPU 1 lost links 4 and 11.
HGX_NVLINK = "".join(
    f"GPU {gpu}: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000{gpu}-aaaa-bbbb-cccc-dddddddddddd)\n"
    + "".join(f"\t Link {link}: {'<inactive>' if (gpu, link) in {(1, 4), (1, 11)} else '26.562 GB/s'}\n"
              for link in range(18))
    for gpu in range(8))


def test_links_parse_nvlink_status_counts_active_and_down_links() -> None:
    gpus = parse_nvlink_status(HGX_NVLINK)
    assert [(g.gpu_index, g.links_total, g.links_active) for g in gpus] == [
        (i, 18, 16 if i == 1 else 18) for i in range(8)]
    assert gpus[1].down_links == (4, 11) and gpus[0].down_links == ()
    reading = LinkReading(gpus, None, (), "no InfiniBand devices")
    assert reading.down_reason() == "GPU 1: NVLink links 4, 11 down"
    healthy = parse_nvlink_status(HGX_NVLINK.replace("<inactive>", "26.562 GB/s"))
    assert LinkReading(healthy, None, (), None).down_reason() is None


def test_links_agent_on_the_h200_reference_node_reports_no_nvlink_and_invents_none(tmp_path: Path) -> None:
    # The reference node (one H200, tests/backend/node_agent/data): its `-q -x` XML has no per-link
    # NVLink state (the `<fabric>` block is N/A) and `nvidia-smi nvlink -s` prints nothing on one GPU.
    (tmp_path / "out.xml").write_text(H200_XML)
    fake = _fake_nvidia_smi(tmp_path, f'[ "$*" = "-q -x" ] && exec cat {tmp_path / "out.xml"}\n'
                                      '[ "$*" = "nvlink -s" ] && exit 0\nexit 9\n')
    reading = read_links(has_gpus=True, nvidia_smi=fake, infiniband=tmp_path / "no-ib")
    assert reading.nvlink == () and reading.infiniband == ()
    assert reading.nvlink_unavailable_reason == "no NVLink links reported (one GPU, or GPUs without NVLink)"
    assert reading.infiniband_unavailable_reason == f"no InfiniBand devices ({tmp_path / 'no-ib'} absent)"
    assert reading.down_reason() is None
    fake_hgx = _fake_nvidia_smi(tmp_path, f"cat <<'EOF'\n{HGX_NVLINK}EOF\n")
    assert read_links(has_gpus=True, nvidia_smi=fake_hgx, infiniband=tmp_path).nvlink[1].down_links == (4, 11)
    failing = read_links(has_gpus=True, nvidia_smi=_fake_nvidia_smi(tmp_path, "echo busy >&2\nexit 3\n"),
                         infiniband=tmp_path)
    assert failing.nvlink_unavailable_reason == "nvidia-smi nvlink failed (exit 3): busy"
    assert read_links(has_gpus=False, infiniband=tmp_path).nvlink_unavailable_reason == "no GPUs read"


def _port(root: Path, device: str, port: int, state: str, phys: str, layer: str = "InfiniBand") -> None:
    directory = root / device / "ports" / str(port)
    directory.mkdir(parents=True)
    (directory / "state").write_text(f"{state}\n")
    (directory / "phys_state").write_text(f"{phys}\n")
    (directory / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (directory / "link_layer").write_text(f"{layer}\n")


def test_links_read_infiniband_sysfs_and_a_port_down(tmp_path: Path) -> None:
    for hca in range(3):
        _port(tmp_path, f"mlx5_{hca}", 1, "4: ACTIVE", "5: LinkUp")
    _port(tmp_path, "mlx5_10", 1, "1: DOWN", "3: Disabled", "Ethernet")  # switched off: not a fault
    ports, reason = read_infiniband(tmp_path)
    assert reason is None
    assert [(p.device, p.port, p.state, p.phys_state) for p in ports][:2] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp"), ("mlx5_1", 1, "ACTIVE", "LinkUp")]
    assert ports[0].rate == "400 Gb/sec (4X NDR)" and ports[0].link_layer == "InfiniBand"
    assert LinkReading((), "no GPUs read", ports, None).down_reason() is None
    _port(tmp_path, "mlx5_3", 1, "1: DOWN", "2: Polling")  # cable pulled: the port looks for a peer
    _port(tmp_path, "mlx5_3", 2, "2: INIT", "5: LinkUp")  # up, but the subnet manager never set it up
    ports, _ = read_infiniband(tmp_path)
    assert [p for p in ports if p.down] == [IbPort("mlx5_3", 1, "DOWN", "Polling", "400 Gb/sec (4X NDR)",
                                                   "InfiniBand"),
                                            IbPort("mlx5_3", 2, "INIT", "LinkUp", "400 Gb/sec (4X NDR)",
                                                   "InfiniBand")]
    assert LinkReading((), None, ports, None).down_reason() == "InfiniBand mlx5_3 port 1 DOWN (Polling)"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert read_infiniband(empty) == ((), f"no InfiniBand ports under {empty}")


def test_links_reading_travels_as_json_and_makes_a_node_degraded(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, "1: DOWN", "2: Polling")
    reading = LinkReading(parse_nvlink_status(HGX_NVLINK), None, read_infiniband(tmp_path)[0], None)
    back = LinkReading.from_dict(json.loads(json.dumps(dataclasses.asdict(reading))))
    assert back == reading
    now = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    telemetry = NodeTelemetry(read_at=now.isoformat(), gpus=None, gpus_unavailable_reason="x", xid_events=[],
                              links=back)
    assert degraded_reason(telemetry, now) == "GPU 1: NVLink links 4, 11 down"
    assert degraded_reason(dataclasses.replace(telemetry, links=None), now) is None


def test_links_agent_reading_includes_links() -> None:
    reading = json.loads(json.dumps(agent.reading()))  # this machine: no NVIDIA driver, no NVLink asked
    links = LinkReading.from_dict(reading["links"])
    assert links.nvlink == () and links.nvlink_unavailable_reason == "no GPUs read"
    assert links == read_links(has_gpus=False)  # InfiniBand: whatever this machine's sysfs holds
