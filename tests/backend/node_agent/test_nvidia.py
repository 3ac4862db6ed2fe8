"""The agent's nvidia-smi parser, checked against the real output of an H200 node (data/)."""

from __future__ import annotations

import csv
import os
import stat
from pathlib import Path

import pytest

from backend.node_agent.nvidia import parse_nvidia_smi_xml, read_gpus

DATA = Path(__file__).parent / "data"
H200_XML = (DATA / "nvidia-smi-q.xml").read_text()


def _query_row() -> dict[str, str]:
    """`nvidia-smi --query-gpu=... --format=csv` taken on the same node as the XML."""
    with (DATA / "query.csv").open() as handle:
        rows = list(csv.DictReader(handle, skipinitialspace=True))
    assert len(rows) == 1
    return rows[0]


def test_nvidia_parse_h200_matches_query_csv() -> None:
    inventory = parse_nvidia_smi_xml(H200_XML)
    row = _query_row()

    assert inventory.driver_version == row["driver_version"] == "580.159.04"
    assert inventory.cuda_version == "13.0"
    assert inventory.unavailable_reason is None
    [gpu] = inventory.devices
    assert gpu.index == int(row["index"])
    assert gpu.name == row["name"] == "NVIDIA H200"
    assert gpu.uuid == row["uuid"]
    assert gpu.pci_bus_id == row["pci.bus_id"]
    assert gpu.memory_total_mib == int(row["memory.total [MiB]"].split()[0]) == 143771
    assert gpu.memory_used_mib == int(row["memory.used [MiB]"].split()[0]) == 0
    assert gpu.utilization_pct == int(row["utilization.gpu [%]"].split()[0])
    assert gpu.memory_utilization_pct == int(row["utilization.memory [%]"].split()[0])
    assert gpu.temperature_c == int(row["temperature.gpu"]) == 31
    assert gpu.sm_clock_mhz == int(row["clocks.current.sm [MHz]"].split()[0]) == 345
    assert gpu.memory_clock_mhz == int(row["clocks.current.memory [MHz]"].split()[0]) == 3201
    assert gpu.power_limit_w == float(row["power.limit [W]"].split()[0]) == 700.0
    assert gpu.ecc_volatile_uncorrected == int(row["ecc.errors.uncorrected.volatile.total"]) == 0


def test_nvidia_parse_h200_reports_not_available_as_none() -> None:
    [gpu] = parse_nvidia_smi_xml(H200_XML).devices

    # Hopper remaps rows instead of retiring pages: the driver says N/A, so do we.
    assert gpu.retired_pages is None
    assert gpu.remapped_rows_uncorrectable == 0
    assert gpu.remapped_rows_pending is False
    # The XML was read at another moment than the CSV: the one-second average, not the CSV's figure.
    assert gpu.power_draw_w == 101.34


def test_nvidia_parse_legacy_layout_and_errors() -> None:
    document = """<nvidia_smi_log><driver_version>470.1</driver_version>
      <gpu id="00000000:07:00.0"><product_name>A100-SXM4-80GB</product_name><minor_number>3</minor_number>
        <uuid>GPU-x</uuid><fb_memory_usage><total>81920 MiB</total><used>N/A</used></fb_memory_usage>
        <utilization><gpu_util>97 %</gpu_util></utilization>
        <ecc_errors><volatile><single_bit><total>4</total></single_bit><double_bit><total>2</total></double_bit>
        </volatile></ecc_errors>
        <retired_pages><multiple_single_bit_retirement><retired_count>1</retired_count>
        </multiple_single_bit_retirement><double_bit_retirement><retired_count>2</retired_count>
        </double_bit_retirement></retired_pages>
        <power_readings><power_draw>312.5 W</power_draw><power_limit>400.00 W</power_limit></power_readings>
        <temperature><gpu_temp>Unknown Error</gpu_temp></temperature>
      </gpu></nvidia_smi_log>"""

    [gpu] = parse_nvidia_smi_xml(document).devices

    assert (gpu.index, gpu.name, gpu.pci_bus_id) == (0, "A100-SXM4-80GB", "00000000:07:00.0")
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.utilization_pct) == (81920, None, 97)
    assert (gpu.ecc_volatile_uncorrected, gpu.retired_pages) == (2, 3)
    assert (gpu.power_draw_w, gpu.power_limit_w, gpu.temperature_c) == (312.5, 400.0, None)
    assert parse_nvidia_smi_xml(document).cuda_version is None


def _fake_nvidia_smi(directory: Path, script: str) -> str:
    executable = directory / "nvidia-smi"
    executable.write_text("#!/bin/sh\n" + script)
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    return str(executable)


def test_nvidia_read_gpus_runs_nvidia_smi(tmp_path: Path) -> None:
    (tmp_path / "out.xml").write_text(H200_XML)
    fake = _fake_nvidia_smi(tmp_path, f'[ "$*" = "-q -x" ] && exec cat {tmp_path / "out.xml"}\nexit 9\n')

    inventory = read_gpus(nvidia_smi=fake)

    assert [gpu.name for gpu in inventory.devices] == ["NVIDIA H200"]


def test_nvidia_read_gpus_without_driver_reports_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = read_gpus()
    failing = read_gpus(
        nvidia_smi=_fake_nvidia_smi(
            tmp_path, "echo 'NVIDIA-SMI has failed because it could not talk'\nexit 9\n"
        )
    )

    assert missing.devices == () and "nvidia-smi not found" in (missing.unavailable_reason or "")
    assert failing.devices == () and "exit 9" in (failing.unavailable_reason or "")
    assert "could not talk" in (failing.unavailable_reason or "")
    assert os.environ["PATH"] == str(tmp_path)
