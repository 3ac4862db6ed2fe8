"""The controller's accounting set-up (`backend/provisioning/node_config/accounting.py`): the script it
sends, the files it writes and the bounded waits (the real daemons:
`tests/backend/local/test_local_accounting.py`)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

from backend.fabric import slurm
from backend.provisioning.drivers.local import node_setup
from backend.provisioning.node_config import accounting
from backend.provisioning.node_config.shell import CommandResult, NodeShell
from tests.backend.engine.test_fabric import layout


class RecordingShell(NodeShell):
    """Records each script it is sent and answers success."""

    def __init__(self) -> None:
        self.name = "jumphost"
        self.scripts: list[str] = []
        self.timeouts: list[float] = []

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        self.scripts.append((stdin or b"").decode())
        self.timeouts.append(timeout)
        return CommandResult(0, "", "")


SETTINGS = accounting.Accounting(cluster="train", user="ubuntu", account="ubuntu",
                                 slurmdbd_conf=slurm.slurmdbd_conf("train"))


def _written(script: str) -> dict[str, tuple[str, str, str]]:
    """path -> (content, owner, mode) of the files a script writes."""
    files = {}
    for temporary, encoded in re.findall(r"base64 -d > (\S+) <<'GPUCLOUD_EOF'\n(.*?)GPUCLOUD_EOF", script,
                                         re.S):
        owner = re.search(rf"chown (\S+) {re.escape(temporary)}", script)
        mode = re.search(rf"chmod (\d+) {re.escape(temporary)}", script)
        assert owner is not None and mode is not None
        path = temporary.removesuffix(".gpucloud-new")
        files[path] = (base64.b64decode(encoded).decode(), owner.group(1), mode.group(1))
    return files


def test_accounting_starts_mariadb_then_slurmdbd_then_registers_in_one_round_trip() -> None:
    shell = RecordingShell()
    accounting.start(shell, SETTINGS)
    [script] = shell.scripts
    files = _written(script)
    assert files[accounting.SLURMDBD_CONF] == (slurm.slurmdbd_conf("train"), "slurm:", "600")
    cnf, owner, mode = files["/etc/mysql/gpucloud-slurmdbd.cnf"]
    assert (owner, mode) == ("root:", "644")
    for line in ("skip-networking", "innodb_buffer_pool_size=16M", "performance_schema=OFF",
                 "datadir=/var/lib/slurm/mariadb", "socket=/run/mysqld/mysqld.sock"):
        assert line in cnf.splitlines(), line
    # In order: the database made once, MariaDB up, slurmdbd's login, slurmdbd up, then the registration.
    steps = ["mariadb-install-db", "/usr/sbin/mariadbd", "wait_for 60 MariaDB", "IDENTIFIED VIA unix_socket",
             "/usr/sbin/slurmdbd -D", "wait_for 120 slurmdbd", "sacctmgr -i add cluster train",
             "sacctmgr -i add account ubuntu Cluster=train", "sacctmgr -i add user ubuntu Account=ubuntu"]
    positions = [script.index(step) for step in steps]
    assert positions == sorted(positions), dict(zip(steps, positions, strict=True))
    assert "AdminLevel=Administrator QOS=normal DefaultQOS=normal" in script
    assert "install -d -o mysql -g slurm -m 750 /run/mysqld" in script  # only slurmdbd reaches the socket
    assert script.index("flock -w") < script.index("mariadb-install-db")  # one set-up at a time
    assert shell.timeouts == [accounting.SCRIPT_SECONDS]
    assert accounting.SCRIPT_SECONDS > accounting.LOCK_SECONDS + accounting.SLURMDBD_SECONDS  # all bounded


def test_accounting_wait_is_bounded_and_says_how_the_log_ends(tmp_path: Path) -> None:
    shell = RecordingShell()
    accounting.start(shell, SETTINGS)
    [wait_for] = [line for line in shell.scripts[0].splitlines() if line.startswith("wait_for()")]
    (tmp_path / "log").write_text("fatal: the last words\n")
    done = subprocess.run(["sh", "-c", f"{wait_for}\nwait_for 1 slurmdbd {tmp_path / 'log'} false"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1
    log = tmp_path / "log"
    assert done.stderr == f"slurmdbd did not answer within 1 s; {log} ends:\nfatal: the last words\n"
    ok = subprocess.run(["sh", "-c", f"{wait_for}\nwait_for 1 x /dev/null true && echo up"],
                        capture_output=True, text=True, timeout=30, check=False)
    assert ok.stdout == "up\n"


def test_local_controller_starts_accounting_only_when_slurm_conf_keeps_it_in_slurmdbd() -> None:
    shell = RecordingShell()
    host = node_setup.LOCAL_SLURM_HOST
    without = slurm.slurm_conf(layout(2), slurm.SlurmHost(accounting=False))
    accounting.start_if_kept(shell, without, host, "ubuntu")
    accounting.sync_qos(shell, without, "ubuntu", [{"name": "high", "priority": 10}])
    assert shell.scripts == []
    accounting.start_if_kept(shell, slurm.slurm_conf(layout(2), host), host, "ubuntu")
    [script] = shell.scripts
    files = _written(script)
    assert files[accounting.SLURMDBD_CONF][0] == slurm.slurmdbd_conf("train", node_setup.LOCAL_SLURM_HOST)
    assert "PidFile=/run/slurm/slurmdbd.pid" in files[accounting.SLURMDBD_CONF][0]
    assert "sacctmgr -i add user ubuntu Account=ubuntu DefaultAccount=ubuntu Cluster=train" in script


@pytest.mark.parametrize(("key", "value"), [("ClusterName", "train"), ("AccountingStoragePort", "6819"),
                                            ("NoSuchKey", None)])
def test_slurm_setting_reads_one_line(key: str, value: str | None) -> None:
    conf = slurm.slurm_conf(layout(2))
    assert accounting.slurm_setting(conf, key) == value
    assert accounting.uses_slurmdbd(conf)
