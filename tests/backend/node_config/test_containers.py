"""Slurm's containers on a node (`node_config/containers.py`, `oci_runtime.py`): oci.conf uses only what
Slurm 22.05 knows, and the runtime turns Slurm's copy of a bundle's config.json into one crun runs
rootless as the job's user on a read-only image (real runs on nodes:
`tests/backend/local/test_local_containers.py`)."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.provisioning.node_config import containers, oci_runtime

# Slurm 22.05's oci.conf keys and the replacements its slurmstepd knows (it stops at any other `%x`).
OCI_KEYS = {"ContainerPath", "CreateEnvFile", "RunTimeCreate", "RunTimeStart", "RunTimeRun", "RunTimeQuery",
            "RunTimeKill", "RunTimeDelete"}
PATTERNS = set("%@bejnrstu")
UID = 2_000_123


def test_oci_conf_runs_the_runtime_with_slurm_22_05_keys_and_patterns_only() -> None:
    conf = containers.oci_conf(["/mnt/shared"])
    settings = dict(line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#"))
    assert set(settings) == {"RunTimeRun", "RunTimeQuery", "RunTimeKill", "RunTimeDelete"} <= OCI_KEYS
    for value in settings.values():
        assert value.startswith('"') and value.endswith('"') and '"' not in value[1:-1], value
        assert set(re.findall(r"%(.)", value)) <= PATTERNS, value
    assert settings["RunTimeRun"] == f'"{containers.RUNTIME} run %u --bind /mnt/shared %b %n.%u.%j.%s.%t"'
    # Slurm runs these as root: the runtime runs crun as the job's user (%u), on that user's state.
    assert settings["RunTimeKill"] == f'"{containers.RUNTIME} kill %u %n.%u.%j.%s.%t"'


def test_node_files_install_the_runtime_and_the_task_prolog_runnable() -> None:
    files = {file.path: file for file in containers.node_files(["/mnt/shared"])}
    assert set(files) == {containers.OCI_CONF, containers.RUNTIME, "/etc/slurm/gpucloud-task-prolog"}
    assert files[containers.RUNTIME].content.startswith(b"#!/usr/bin/python3 -I\n")
    assert files[containers.RUNTIME].mode == files["/etc/slurm/gpucloud-task-prolog"].mode == 0o755
    compile(files["/etc/slurm/gpucloud-task-prolog"].content, "task-prolog", "exec")
    assert containers.images_link_script() == (
        '[ "$(readlink /images)" = /var/lib/gpucloud/images/names ] || '
        "ln -sfn /var/lib/gpucloud/images/names /images")


def test_task_prolog_saves_the_environment_of_a_container_task_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    prolog = containers.TASK_PROLOG
    plain, bundle = tmp_path / "work", tmp_path / "oci-job00012-00000"
    for directory in (plain, bundle):
        directory.mkdir()
        (directory / "config.json").write_text("{}")
        monkeypatch.chdir(directory)
        monkeypatch.setenv("SLURM_PROCID", "3")
        exec(compile(prolog, "task-prolog", "exec"), {})
    assert not (plain / oci_runtime.TASK_ENVIRONMENT).exists()
    saved = bundle / oci_runtime.TASK_ENVIRONMENT
    assert json.loads(saved.read_text())["SLURM_PROCID"] == "3" and saved.stat().st_mode & 0o777 == 0o600


def _image(root: Path) -> Path:
    """An image's rootfs: merged /usr, a /home with someone's directory, /etc with a file, no /mnt."""
    rootfs = root / "bundle" / "rootfs"
    for directory in ("usr/bin", "etc", "home/someone", "proc", "tmp"):
        (rootfs / directory).mkdir(parents=True)
    (rootfs / "bin").symlink_to("usr/bin")
    (rootfs / "etc" / "marker").write_text("one\n")
    (rootfs / ".dockerenv").write_text("")
    (root / "bundle" / "config.json").write_text(json.dumps({"process": {"env": ["PATH=/opt/conda/bin:/bin",
                                                                                "HOME=/root", "LANG=C"]}}))
    return rootfs


def _slurm_copy(image_root: Path) -> dict[str, Any]:
    """config.json as slurmstepd writes it in the step's directory: the image's, with the task added."""
    return {
        "root": {"path": str(image_root), "readonly": True},
        "hostname": "umoci-default",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "cwd": "/", "args": ["hostname"],
                    "env": ["PATH=/opt/conda/bin:/bin", "HOME=/root", "LANG=C", "PATH=/usr/bin:/bin",
                            "HOME=/home/ubuntu", "PWD=/home/ubuntu/work", "SLURM_JOB_ID=7",
                            "CUDA_VISIBLE_DEVICES=0,1", "PMIX_SERVER_TMPDIR=/nonexistent"]},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
                   {"destination": "/tmp/slurm/startup", "type": "none", "source": "/spool/script"},
                   {"destination": "/etc/resolv.conf", "type": "bind", "source": "/etc/resolv.conf"}],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "network")],
                  "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}]},
    }


def test_the_runtime_runs_the_image_as_the_user_with_its_directories_on_an_underlay(tmp_path: Path) -> None:
    image_root = _image(tmp_path)
    home, volumes = tmp_path / "home" / "ubuntu", tmp_path / "mnt" / "shared"
    (home / "work").mkdir(parents=True)
    volumes.mkdir(parents=True)
    spool = tmp_path / "spool"
    spool.mkdir()
    copy = _slurm_copy(image_root)
    copy["process"]["env"] += [f"PWD={home / 'work'}"]
    image = json.loads((image_root.parent / "config.json").read_text())
    config = oci_runtime.adapt(copy, image, image_root=str(image_root), bundle=str(spool), uid=UID, gid=UID,
                               home=str(home), extra_binds=[str(volumes), str(tmp_path / "absent")])

    underlay = spool / oci_runtime.UNDERLAY
    assert config["root"] == {"path": str(underlay), "readonly": True}
    assert config["process"]["user"] == {"uid": UID, "gid": UID} and config["process"]["terminal"] is False
    assert config["process"]["cwd"] == str(home / "work")  # bound: the home holds it
    assert config["linux"]["uidMappings"] == config["linux"]["gidMappings"] == [
        {"containerID": UID, "hostID": UID, "size": 1}]
    assert [n["type"] for n in config["linux"]["namespaces"]] == ["pid", "ipc", "mount", "user"]
    assert "hostname" not in config
    env = config["process"]["env"]
    # The image's PATH and LANG, the job's HOME, Slurm's and the GPU binding variables.
    assert {"PATH=/opt/conda/bin:/bin", "LANG=C", "HOME=/home/ubuntu", "SLURM_JOB_ID=7",
            "CUDA_VISIBLE_DEVICES=0,1"} <= set(env) and len(env) == len({e.split("=")[0] for e in env})

    by_destination = {m["destination"]: m for m in config["mounts"]}
    # The image's entries bound read-only into the underlay, a level deeper where a mount goes (/tmp of
    # the job's paths), its symlinks copied; the image has no resolv.conf, so none is bound.
    for entry in ("/usr", "/etc", "/.dockerenv", "/home"):
        assert by_destination[entry]["source"] == str(image_root) + entry
        assert by_destination[entry]["options"][-1] == "ro"
    assert (underlay / "bin").readlink() == Path("usr/bin") and (underlay / ".dockerenv").is_file()
    assert by_destination[str(home)]["source"] == str(home)  # under /tmp here: made in the job's tmpfs
    assert by_destination[str(volumes)]["options"] == ["rbind", "nosuid", "nodev"]
    assert "/etc/resolv.conf" not in by_destination and str(tmp_path / "absent") not in by_destination
    assert "/nonexistent" not in by_destination
    # Binds of the underlay first, then Slurm's mounts in their order, then the job's directories.
    order = [m["destination"] for m in config["mounts"]]
    assert order.index("/usr") < order.index("/proc") < order.index("/tmp/slurm/startup") < order.index(
        str(home))


def test_the_underlay_goes_as_deep_as_a_mount_point_inside_the_image(tmp_path: Path) -> None:
    image_root = _image(tmp_path)
    mounts = oci_runtime.underlay(str(image_root), str(tmp_path / "under"), ["/home/ubuntu", "/mnt/shared"])
    sources = {m["destination"]: m["source"] for m in mounts}
    # /home is the user's to make /home/ubuntu in, someone's directory still the image's; /mnt, absent
    # from the image, crun makes in the underlay.
    assert "/home" not in sources and sources["/home/someone"] == str(image_root / "home" / "someone")
    assert (tmp_path / "under" / "home").is_dir() and not (tmp_path / "under" / "home" / "ubuntu").exists()
    assert not (tmp_path / "under" / "mnt").exists()


def test_the_runtime_acts_as_the_jobs_user_only() -> None:
    """Slurm runs query, kill and delete as root: the runtime becomes the job's user first (in a process
    of its own here: it changes the process for good)."""
    probe = ("import os; from backend.provisioning.node_config.oci_runtime import become; become('nobody'); "
             "print(os.getuid(), os.getgid(), os.getgroups())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    nobody = pwd.getpwnam("nobody")
    if os.geteuid() == 0:
        assert done.stdout.split() == [str(nobody.pw_uid), str(nobody.pw_gid), "[]"], done.stderr
    else:
        assert done.returncode != 0 and "runs as nobody or root" in done.stderr
    assert oci_runtime.state_root("ubuntu") == "/tmp/crun-ubuntu"


def test_only_the_users_own_private_state_directory_is_used(tmp_path: Path) -> None:
    mine = tmp_path / "crun-me"
    assert oci_runtime.state_directory(str(mine), os.getuid()) == str(mine)
    assert mine.stat().st_mode & 0o777 == 0o700
    assert oci_runtime.state_directory(str(mine), os.getuid()) == str(mine)  # again: kept
    mine.chmod(0o755)
    with pytest.raises(oci_runtime.SetupError, match="mode 0700; remove it"):
        oci_runtime.state_directory(str(mine), os.getuid())
    with pytest.raises(oci_runtime.SetupError, match=f"uid {os.getuid() + 1}"):
        oci_runtime.state_directory(str(mine), os.getuid() + 1)


def test_the_saved_task_environment_is_read_once(tmp_path: Path) -> None:
    (tmp_path / oci_runtime.TASK_ENVIRONMENT).write_text(json.dumps({"SLURM_PROCID": "1", "PMIX_RANK": "1"}))
    assert oci_runtime.task_environment(str(tmp_path)) == ["SLURM_PROCID=1", "PMIX_RANK=1"]
    assert oci_runtime.task_environment(str(tmp_path)) == []  # consumed: Slurm removes the directory


def test_a_job_holds_its_bundle_against_the_garbage_collector(tmp_path: Path) -> None:
    digest_hex = "a" * 64
    rootfs = tmp_path / "store" / "bundles" / digest_hex / "rootfs"
    rootfs.mkdir(parents=True)
    with pytest.raises(oci_runtime.SetupError, match="cannot hold the image's lock"):
        oci_runtime.hold_bundle(str(rootfs))
    lock = tmp_path / "store" / "locks" / f"{digest_hex}.lock"
    lock.parent.mkdir()
    lock.touch()
    held = oci_runtime.hold_bundle(str(rootfs))
    assert held is not None
    collector = os.open(lock, os.O_RDWR)  # as images.collect_garbage asks, without waiting
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(collector, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(held)
        fcntl.flock(collector, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the job ended: free
    finally:
        os.close(collector)
    outside = tmp_path / "mine" / "rootfs"  # a bundle of the user's own, in no store
    outside.mkdir(parents=True)
    assert oci_runtime.hold_bundle(str(outside)) is None


def test_the_nvidia_toolkit_hook_passes_the_jobs_gpus_where_the_node_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image_root = _image(tmp_path)
    image = json.loads((image_root.parent / "config.json").read_text())

    def adapted(*extra_env: str) -> dict[str, Any]:
        copy = _slurm_copy(image_root)
        copy["process"]["env"] += list(extra_env)
        spool = tmp_path / f"spool-{len(list(tmp_path.iterdir()))}"
        spool.mkdir()
        return oci_runtime.adapt(copy, image, image_root=str(image_root), bundle=str(spool), uid=UID, gid=UID,
                                 home=str(tmp_path), extra_binds=[])

    # No driver or no toolkit on the node (the local driver's): nothing is added.
    assert "hooks" not in adapted("SLURM_STEP_GPUS=2,3")
    hook, control = tmp_path / "nvidia-container-runtime-hook", tmp_path / "nvidiactl"
    hook.touch()
    control.touch()
    monkeypatch.setattr(oci_runtime, "NVIDIA_HOOK", str(hook))
    monkeypatch.setattr(oci_runtime, "NVIDIA_CONTROL_DEVICE", str(control))
    assert "hooks" not in adapted()  # a job without GPUs gets none
    config = adapted("SLURM_STEP_GPUS=2,3")
    assert config["hooks"]["prestart"] == [{"path": str(hook), "args": ["nvidia-container-runtime-hook",
                                                                        "prestart"]}]
    env = set(config["process"]["env"])
    # The host's indices for the hook; CUDA_VISIBLE_DEVICES inside stays Slurm's numbering.
    assert {"NVIDIA_VISIBLE_DEVICES=2,3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            "CUDA_VISIBLE_DEVICES=0,1"} <= env
