"""The slice slurmd's steps need on a cgroup v2 server without systemd, made before slurmd starts and only
there (the script runs in this machine's `sh`, its paths moved under a temporary directory)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backend.provisioning.drivers.ssh_hosts import footprint


def _run(tmp_path: Path, *, file_system: str, systemd: bool) -> Path:
    cgroup, state = tmp_path / "cgroup", tmp_path / "state"
    cgroup.mkdir()
    state.mkdir()
    (tmp_path / "systemd").mkdir()
    script = (footprint.steps_slice_script()
              .replace("/sys/fs/cgroup", str(cgroup))
              .replace("/run/systemd/system", str(tmp_path / ("systemd" if systemd else "none")))
              .replace(footprint.STATE_DIR, str(state)))
    subprocess.run(["sh", "-ec", f"stat() {{ echo {file_system}; }}\n{script}"], check=True)
    return cgroup


def test_the_steps_slice_is_made_on_cgroup2_without_systemd(tmp_path: Path) -> None:
    cgroup = _run(tmp_path, file_system="cgroup2fs", systemd=False)
    assert (cgroup / "system.slice").is_dir()
    assert (tmp_path / "state" / "made-system-slice").exists()  # the release removes it again


@pytest.mark.parametrize(("file_system", "systemd"), [("cgroup2fs", True), ("tmpfs", False)])
def test_nothing_is_made_under_systemd_or_cgroup_v1(tmp_path: Path, file_system: str, systemd: bool) -> None:
    cgroup = _run(tmp_path, file_system=file_system, systemd=systemd)
    assert list(cgroup.iterdir()) == [] and list((tmp_path / "state").iterdir()) == []
