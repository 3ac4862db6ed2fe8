"""How node scripts start daemons (`configure.OWN`'s `launch`, `start_command`), run by a real shell on this
machine, which has no systemd running (the systemd branch is tested on a stand-in server that boots systemd:
tests/backend/local/test_pool_clusters.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from backend.provisioning.node_config.configure import OWN, start_command


def test_launch_detaches_the_command_with_its_arguments_appending_output_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "daemon.out"
    log.write_text("before\n")
    script = f"{OWN}launch daemon {log} sh -c 'echo \"$1\"' sh 'two words'\n"
    subprocess.run(["sh", "-e", "-c", script], check=True, timeout=10)
    deadline = time.monotonic() + 5
    while log.read_text() != "before\ntwo words\n":
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)


def test_start_command_starts_a_program_only_when_it_does_not_run_and_quotes_extra_arguments() -> None:
    command = start_command("slurmd", "-N", "own 1")
    assert command == ("[ -n \"$(own slurmd)\" ] || "
                       "launch slurmd /var/log/slurm/slurmd.out /usr/sbin/slurmd -D -N 'own 1'")
