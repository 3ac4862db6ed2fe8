"""The data dir is created private, an older one tightened, and one that others own or can write to (or a
path to it that they can swap) refused with one message and nothing changed; `serve` and `doctor` too."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from backend.settings import Settings
from backend.store.data_dir import DataDirError, data_dir_problems, prepare_data_dir
from backend.store.db import make_engine
from backend.store.secrets import KEY_FILE, keyring

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making another user's files needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _squatted(path: Path) -> Path:
    """A directory someone else made first, as a squatter in /var/tmp would."""
    path.mkdir(mode=0o755)
    os.chown(path, NOBODY, NOBODY)
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(DataDirError) as refused:
        prepare_data_dir(path)
    assert data_dir_problems(path)[0] == str(refused.value)  # what doctor prints, first
    return str(refused.value)


def test_pytests_own_temporary_directories_are_safe_parents(tmp_path: Path) -> None:
    # Every test that runs the backend in a tmp_path relies on this (/tmp: root's and sticky).
    assert data_dir_problems(tmp_path) == []


def test_a_missing_data_dir_is_created_0700_with_its_database_and_key_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "gpucloud"
    assert prepare_data_dir(data_dir) == []
    assert (_mode(tmp_path / "new"), _mode(data_dir)) == (0o755, 0o700)
    settings = Settings(data_dir=data_dir, database_url="", secret_key="")
    engine = make_engine(settings)
    try:
        with engine.begin() as connection:  # WAL: -wal and -shm appear beside the database
            connection.execute(text("CREATE TABLE t (x INTEGER)"))
            connection.execute(text("INSERT INTO t VALUES (1)"))
        names = ("gpucloud.db", "gpucloud.db-wal", "gpucloud.db-shm")
        files = {name: _mode(data_dir / name) for name in names}
    finally:
        engine.dispose()
    keyring(settings)
    assert files == dict.fromkeys(files, 0o600)
    assert _mode(data_dir / KEY_FILE) == 0o600
    assert prepare_data_dir(data_dir) == []  # nothing to do the second time


@as_root
def test_a_squatted_data_dir_is_refused_naming_it_and_nothing_changes(tmp_path: Path) -> None:
    data_dir = _squatted(tmp_path / "gpucloud")
    message = _refusal(data_dir)
    assert message.startswith(f"{data_dir} is owned by uid {NOBODY}")
    assert "mode 0755" in message and "not by uid 0 (root)" in message
    assert "choose another GPUCLOUD_DATA_DIR" in message and f"chmod 0700 {data_dir}" in message
    assert list(data_dir.iterdir()) == [] and _mode(data_dir) == 0o755 and data_dir.stat().st_uid == NOBODY


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
def test_a_data_dir_others_can_write_to_is_refused(tmp_path: Path, mode: int) -> None:
    data_dir = tmp_path / "gpucloud"
    data_dir.mkdir()
    data_dir.chmod(mode)
    message = _refusal(data_dir)
    assert message.startswith(f"{data_dir} is owned by") and f"mode {mode:04o}" in message
    assert f"chmod 0700 {data_dir}" in message
    assert _mode(data_dir) == mode and not (data_dir / "gpucloud.db").exists()


def test_a_parent_others_can_write_to_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone can rename our data dir away and put theirs there
    message = _refusal(shared / "gpucloud")
    assert message.startswith(f"{shared}, a directory on the way to it,") and "mode 0777" in message
    assert f"choose a GPUCLOUD_DATA_DIR outside {shared}" in message
    assert list(shared.iterdir()) == []


@as_root
def test_a_root_owned_sticky_parent_is_accepted_and_a_sticky_one_of_another_user_is_not(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"  # like /tmp and /var/tmp
    shared.mkdir()
    shared.chmod(0o1777)
    assert prepare_data_dir(shared / "gpucloud") == []
    assert _mode(shared / "gpucloud") == 0o700
    os.chown(shared, NOBODY, NOBODY)  # its owner could still remove or rename our entry
    message = _refusal(shared / "gpucloud")
    assert message.startswith(f"{shared}, a directory on the way to it, is owned by uid {NOBODY}")


@as_root
def test_a_parent_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = _squatted(tmp_path / "theirs")
    message = _refusal(theirs / "gpucloud")
    assert message.startswith(f"{theirs}, a directory on the way to it, is owned by uid {NOBODY}")
    assert list(theirs.iterdir()) == []


@as_root
def test_symbolic_links_are_followed_and_one_of_another_user_is_refused(tmp_path: Path) -> None:
    ours = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(ours)
    assert prepare_data_dir(link) == []  # ours, to a directory of ours: the real one is created
    assert _mode(ours) == 0o700 and link.is_symlink()
    os.lchown(link, NOBODY, NOBODY)  # its owner can repoint it whenever they like
    assert _refusal(link).startswith(f"{link}, a symbolic link on the way to it, is owned by uid {NOBODY}")
    os.lchown(link, 0, 0)
    os.chown(ours, NOBODY, NOBODY)  # a link of ours to a directory someone else owns
    assert _refusal(link).startswith(f"{ours} is owned by uid {NOBODY}")


@as_root
def test_a_database_another_user_planted_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "gpucloud"
    data_dir.mkdir(mode=0o700)
    planted = data_dir / "gpucloud.db"
    planted.touch(mode=0o600)
    os.chown(planted, NOBODY, NOBODY)
    assert _refusal(data_dir).startswith(f"{planted} is owned by uid {NOBODY}")


def test_an_older_install_others_can_read_is_tightened_in_place(tmp_path: Path) -> None:
    data_dir = tmp_path / "gpucloud"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    for name in ("gpucloud.db", KEY_FILE):
        (data_dir / name).touch()
        (data_dir / name).chmod(0o644)
    database, key = data_dir / "gpucloud.db", data_dir / KEY_FILE
    assert prepare_data_dir(data_dir) == [
        f"{data_dir} 0755 -> 0700", f"{database} 0644 -> 0600", f"{key} 0644 -> 0600"
    ]
    assert (_mode(data_dir), _mode(database), _mode(key)) == (0o700, 0o600, 0o600)


def _cli(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "GPUCLOUD_DATA_DIR": str(data_dir), **env}
    environment.pop("GPUCLOUD_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], env=environment, capture_output=True,
                          text=True, timeout=60, check=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@as_root
def test_serve_and_doctor_refuse_a_squatted_data_dir_in_one_message(tmp_path: Path) -> None:
    data_dir = _squatted(tmp_path / "gpucloud")
    port = _free_port()
    served = _cli(data_dir, "serve", GPUCLOUD_PORT=str(port), GPUCLOUD_EMBEDDED_WORKER="false")
    assert served.returncode == 1 and served.stdout == ""
    assert served.stderr.count("\n") == 1, served.stderr
    prefix = "gpucloud-backend serve: unsafe data dir:"
    assert served.stderr.startswith(f"{prefix} {data_dir} is owned by uid {NOBODY}")
    assert "with mode 0755" in served.stderr and f"chmod 0700 {data_dir}" in served.stderr
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # it never listened
    assert list(data_dir.iterdir()) == [] and _mode(data_dir) == 0o755 and data_dir.stat().st_uid == NOBODY

    doctor = _cli(data_dir, "doctor", GPUCLOUD_DRIVER="simulated")
    assert doctor.returncode == 1
    assert f"data dir {data_dir} (GPUCLOUD_DATA_DIR): unsafe" in doctor.stdout
    assert f"  {data_dir} is owned by uid {NOBODY}" in doctor.stdout
    assert list(data_dir.iterdir()) == []


def test_a_command_tightens_an_older_install_and_says_so(tmp_path: Path) -> None:
    data_dir = tmp_path / "gpucloud"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    migrated = _cli(data_dir, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"tightened {data_dir} 0755 -> 0700" in migrated.stderr
    assert _mode(data_dir) == 0o700 and _mode(data_dir / "gpucloud.db") == 0o600
    doctor = _cli(data_dir, "doctor", GPUCLOUD_DRIVER="simulated")
    assert doctor.returncode == 0 and f"data dir {data_dir} (GPUCLOUD_DATA_DIR): ok" in doctor.stdout
