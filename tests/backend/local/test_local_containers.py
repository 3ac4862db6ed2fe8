"""Containers on a real 2-node local cluster (root, Debian's Slurm 22.05 and crun): an image the test builds
(static busybox and a marker file, packed with umoci), served by Debian's docker-registry on loopback,
imported into the cluster's store and run with `srun --container=/images/<name>` and `sbatch --container`
as the cluster's user, rootless, with an MPI allreduce (Debian's OpenMPI over Slurm's PMIx) across both
nodes; then switched to a new image while a job runs on the old one, and a cancelled job's container ended.
The store is not what is tested here, so SQLite only."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning import images
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import LocalCluster, run
from backend.provisioning.drivers.local.node_setup import cluster_uid
from backend.provisioning.node_config import containers
from tests.backend.engine.conftest import get, sessions
from tests.backend.local.test_local_driver_day2 import _cluster, _poll
from tests.backend.local.test_local_driver_nodes import driver
from tests.backend.provisioning.test_images import (
    Registry,
    _push,
    _require_tools,
    _run,
    _start_registry,
    _stop,
)

__all__ = ["driver", "sessions"]  # fixtures, used here
IMAGE = "tools"
SRUN = "srun --mem=1G"


def _build_image(layout: Path, work: Path, tag: str, marker: str) -> None:
    """Tag `tag` of the layout: static busybox with every applet linked, and /etc/marker saying `marker`."""
    if not (layout / "index.json").exists():
        _run("umoci", "init", "--layout", str(layout))
        _run("umoci", "new", "--image", f"{layout}:base")
    bundle = work / f"bundle-{tag}"
    _run("umoci", "unpack", "--rootless", "--image", f"{layout}:base", str(bundle))
    rootfs = bundle / "rootfs"
    for directory in ("bin", "etc"):
        (rootfs / directory).mkdir()
    busybox = shutil.which("busybox")
    assert busybox is not None
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in set(applets) - {"busybox"}:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "marker").write_text(f"{marker}\n")
    _run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))
    _run("umoci", "config", "--image", f"{layout}:{tag}", "--config.cmd", "/bin/sh")


# What OpenMPI reads at run time besides its libraries: its help texts (the error messages) and its
# default MCA parameters (Debian's turn off the ofi, openib and ucx transports, which need hardware).
OPENMPI_DATA = (Path("/usr/share/openmpi"), Path("/etc/openmpi"))


def _copy_tree(source: Path, rootfs: Path) -> None:
    """`source` into the image at the same path, without headers, static archives and pkg-config files."""
    shutil.copytree(source, rootfs / str(source).lstrip("/"), symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("include", "*.a", "pkgconfig"))


def _add_mpi_program(layout: Path, work: Path, tag: str) -> None:
    """Tag `tag`: busybox plus an MPI program (an MPI_Allreduce over the step's ranks) built here with
    Debian's OpenMPI, with OpenMPI's and PMIx's libraries, plugins and data files and every library they
    load. No OpenMPI setting is needed (see docs/guides/containers.md, "MPI"): Slurm's PMIx server wires
    the ranks up, the TCP transport finds the node's network, and the session directory is the node's
    /tmp, bound in as PMIx's."""
    bundle = work / f"bundle-{tag}"
    _run("umoci", "unpack", "--rootless", "--image", f"{layout}:1", str(bundle))
    rootfs = bundle / "rootfs"
    program = rootfs / "opt" / "mpi_allreduce"
    program.parent.mkdir()
    _run("mpicc", "-O2", "-o", str(program), str(Path(__file__).with_name("data") / "mpi_allreduce.c"))
    openmpi = next(Path("/usr/lib").glob("*/openmpi/lib"))  # Debian's OpenMPI 4.1: libmpi, MCA plugins
    pmix = next(Path("/usr/lib").glob("*/pmix2"))  # Debian's libpmix, which OpenMPI and slurmd use
    for tree in (openmpi, pmix, *OPENMPI_DATA):
        _copy_tree(tree, rootfs)
    plugins = sorted(str(p) for tree in (openmpi, pmix) for p in tree.rglob("*.so"))
    listed = subprocess.run(["ldd", str(program), *plugins], capture_output=True, text=True,
                            check=True).stdout
    missing = sorted({line.split()[0] for line in listed.splitlines() if "not found" in line})
    assert not missing, f"OpenMPI's plugins load {missing}: install the Debian packages that have them"
    for library in {word for word in listed.split() if word.startswith("/") and Path(word).is_file()}:
        copy = rootfs / library.lstrip("/")
        if not copy.exists():  # the file itself, under the name it is loaded by
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(library, copy)
    _run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A loopback registry holding team/tools:1 (marker "one"), team/tools:2 (marker "two") and
    team/tools:mpi (tag 1 and the MPI program)."""
    _require_tools()
    tools = {"crun": "crun", "gcc": "gcc", "mpicc": "openmpi-bin and libopenmpi-dev"}
    missing = [f"{tool} (Debian packages {package})" for tool, package in tools.items()
               if not shutil.which(tool)]
    assert not missing, f"containers on nodes need {', '.join(missing)}: apt-get install them (.ci/run does)"
    layout = tmp_path / "layout"
    for tag, marker in (("1", "one"), ("2", "two")):
        _build_image(layout, tmp_path, tag, marker)
    _add_mpi_program(layout, tmp_path, "mpi")
    served = _start_registry(tmp_path / "registry")
    try:
        for tag in ("1", "2", "mpi"):
            _push(layout, tag, served, f"team/tools:{tag}")
        yield served
    finally:
        _stop(served)


def _import(cluster: LocalCluster, registry: Registry, tag: str, name: str = IMAGE) -> str:
    """What the driver's import does for one image: pull it into the cluster's store, point the name at it."""
    imported = images.import_image(registry.ref(f"team/tools:{tag}"), None, cluster.images_store)
    images.switch(cluster.images_store, name, imported.digest)
    return imported.digest


def _user(key: Path, host: str, command: str, *, check: bool = True) -> list[str]:
    """The lines `command` prints as the cluster's user on `host` (its stderr in the failure message)."""
    done = run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=90)
    assert done.returncode == 0 or not check, f"{command}: exit {done.returncode}: {done.stdout}{done.stderr}"
    return done.stdout.splitlines()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_containers_run_the_image_on_both_nodes_as_the_user_and_switch_for_new_jobs(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, registry: Registry,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "ctr")
    local = driver.cluster(cluster["id"], get(admin, cluster["id"])["fabric"]["subnet"])
    first = _import(local, registry, "1")
    key = tmp_path / "key"

    def user(command: str) -> list[str]:
        return _user(key, login, command)

    # Every node shows the store read-only at /images: the image's file, and nothing a user may change.
    assert user(f"readlink {containers.IMAGES}; cat /images/{IMAGE}/rootfs/etc/marker") == [
        f"{containers.STORE_MOUNT}/names", "one"]
    refused = _user(key, login, f"touch /images/{IMAGE}/rootfs/x /images/new 2>&1", check=False)
    assert all("Read-only file system" in line for line in refused) and len(refused) == 2, refused

    # Both nodes run the image (their own hostnames: the node's UTS namespace is kept), each task with its
    # own rank from Slurm and from PMIx (`MpiDefault=pmix`).
    ran = user(f"{SRUN} -N2 --container=/images/{IMAGE} sh -c "
               "'echo $(hostname) $SLURM_PROCID $PMIX_RANK $(cat /etc/marker)'")
    assert sorted(ran) == ["ctr-0 0 0 one", "ctr-1 1 1 one"], ran

    # As the cluster's user, in the working directory, with its home (writable) and the job's environment;
    # the image's root is read-only.
    probe = ("id -u; echo $HOME; pwd; cat seen; echo $SLURM_JOB_NUM_NODES $CUDA_VISIBLE_DEVICES; "
             "touch from-container; touch /x 2>&1 || true")
    inside = user(f"mkdir -p ~/work && cd ~/work && echo seen > seen && {SRUN} --gres=gpu:2 "
                  f"--container=/images/{IMAGE} sh -c {shlex.quote(probe)} && ls from-container")
    uid = str(cluster_uid(local))
    assert inside[:5] == [uid, "/home/ubuntu", "/home/ubuntu/work", "seen", "1 0,1"], inside
    assert "Read-only file system" in inside[5] and inside[6] == "from-container", inside

    # A batch script runs in the image too, its output where sbatch was asked to put it.
    user(f"cd ~/work && sbatch --wait --mem=1G --container=/images/{IMAGE} -o batch.out "
         "--wrap 'cat /etc/marker; pwd'")
    assert user("cat ~/work/batch.out") == ["one", "/home/ubuntu/work"]

    # An MPI program in the image: its ranks on the two nodes wire up through Slurm's PMIx server and
    # MPI_Allreduce their rank + 1 over TCP.
    _import(local, registry, "mpi", name="mpi")
    summed = user(f"{SRUN} -N2 --mpi=pmix --container=/images/mpi /opt/mpi_allreduce")
    assert sorted(summed) == ["rank 0 of 2: sum 3", "rank 1 of 2: sum 3"], summed

    # Update: a job already running keeps the bundle it started on; a new job gets the new image.
    user(f"cd ~/work && sbatch --mem=1G --container=/images/{IMAGE} -o old.out "
         "--wrap 'cat /etc/marker > started; sleep 6; cat /etc/marker'")
    _poll(lambda: user("cat ~/work/started 2>/dev/null || true"), lambda lines: lines == ["one"], seconds=60)
    second = _import(local, registry, "2")
    assert second != first and images.named_digests(local.images_store)[IMAGE] == second
    assert user(f"{SRUN} --container=/images/{IMAGE} cat /etc/marker") == ["two"]
    # The old bundle, held by the running job (a shared lock on its digest), outlives the collector.
    assert images.collect_garbage(local.images_store, in_use=set()) == []
    assert _poll(lambda: user("cat ~/work/old.out 2>/dev/null || true"), lambda lines: bool(lines),
                 seconds=60) == ["one"]
    # Once the job ended (its runtime gone), nothing holds the old bundle: the collector removes it.
    assert _poll(lambda: images.collect_garbage(local.images_store, in_use=set()), bool) == [first]

    # A cancelled job's container goes with it: no process of it is left on the node.
    [victim] = user(f"sbatch --parsable --mem=1G --container=/images/{IMAGE} -o /dev/null "
                    "--wrap 'sleep 300'")
    nodes = [local.node(name, "0.0.0.0") for name in local.node_names() if not name.endswith("jumphost")]

    def sleeping() -> list[int]:
        return [pid for node in nodes for pid in node.running("sleep")]

    assert _poll(sleeping, bool, seconds=30)
    user(f"scancel {victim}")
    assert _poll(sleeping, lambda pids: not pids, seconds=30) == []

    # Every step cleaned up after itself: no bundle directory left in slurmd's spool, nothing logged.
    logs = sorted((local.dir / "nodes").glob("*/log/slurmd.log"))  # the two compute nodes'
    assert len(logs) == 2, logs

    def left_in_spools() -> list[str]:
        spools = [log.parent.parent / "lib" / "slurmd" for log in logs]
        try:
            return [str(path) for spool in spools for path in spool.glob("oci-job*/**")]
        except FileNotFoundError as removed:  # a step's cleanup under way: not done yet
            return [str(removed.filename)]

    assert _poll(left_in_spools, lambda left: not left, seconds=30) == []
    for log in logs:
        errors = [line for line in log.read_text().splitlines() if "error" in line and "container" in line]
        assert not errors, errors
