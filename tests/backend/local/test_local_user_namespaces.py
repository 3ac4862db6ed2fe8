"""A local node's user namespace (issue 28's `sudo`): root of a node is an unprivileged host uid, the host's
programs are bound idmapped, the node's disk is given to its namespace, and the host's root follows no
link the node's root may have planted.

Needs root and Linux 5.19+ with idmapped mounts on / (what `doctor` checks); nothing is mocked.
"""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.provisioning.drivers.local import preflight
from backend.provisioning.drivers.local.driver import tear_down
from backend.provisioning.drivers.local.namespaces import IdMap, LocalCluster, LocalHostError, run, shift_ids
from backend.provisioning.drivers.local.node_setup import cluster_id_map, node_binds, prepare_cluster

ID_MAP = IdMap(base=1_500_000_000, kept=2_999_998)


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    root = Path("/var/tmp") / f"gpucloud-userns-test-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(root, f"u{uuid.uuid4().hex[:6]}", "10.0.8.0/22")
    try:
        yield local
    finally:
        tear_down(local)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_this_host_binds_usr_and_etc_idmapped() -> None:
    # What doctor checks and every node's boot does; the CI host must have it (the suite never skips).
    assert preflight.idmapped_mounts_work()


def test_shift_gives_the_host_s_ids_to_the_namespace_and_follows_no_link(tmp_path: Path) -> None:
    disk, outside = tmp_path / "disk", tmp_path / "outside"
    disk.mkdir()
    outside.write_text("the host's")
    (disk / "root-file").write_text("x")
    (disk / "slurm-file").write_text("x")
    os.chown(disk / "slurm-file", 64030, 64030)
    (disk / "users-file").write_text("x")
    os.chown(disk / "users-file", ID_MAP.kept, ID_MAP.kept)
    (disk / "set-uid").write_text("x")
    (disk / "set-uid").chmod(0o4755)
    (disk / "link").symlink_to(outside)
    os.link(outside, disk / "hard-link")

    shift_ids(disk, ID_MAP)
    shift_ids(disk, ID_MAP)  # idempotent: shifted ids are above the map's count

    def owner(path: Path) -> tuple[int, int]:
        info = os.lstat(path)
        return info.st_uid, info.st_gid

    base = ID_MAP.base
    assert owner(disk) == owner(disk / "root-file") == owner(disk / "link") == (base, base)
    assert owner(disk / "slurm-file") == (base + 64030, base + 64030)
    assert owner(disk / "users-file") == (ID_MAP.kept, ID_MAP.kept)
    assert stat.S_IMODE((disk / "set-uid").stat().st_mode) == 0o4755  # chown cleared it; put back
    assert owner(outside) == (0, 0)  # neither the link's target nor a file linked from elsewhere
    assert ID_MAP.table == f"0 {base} 65536\n{ID_MAP.kept} {ID_MAP.kept} 1\n"


def test_the_host_makes_no_stand_in_gpu_where_a_node_s_link_points(cluster: LocalCluster,
                                                                    tmp_path: Path) -> None:
    # /var/lib/slurm is the node's root's to change: a link planted there must not lead the host's root
    # to make devices in a directory of the host's.
    target = tmp_path / "host-dir"
    target.mkdir()
    node = cluster.node("n-0", "10.0.8.10")
    (node.dir / "lib").mkdir(parents=True)
    (node.dir / "lib" / "gpus").symlink_to(target)
    cluster.up()
    prepare_cluster(cluster)
    node_binds(node)
    assert list(target.iterdir()) == []
    gpus = node.dir / "lib" / "gpus"
    assert gpus.is_dir() and not gpus.is_symlink()
    assert sorted(p.name for p in gpus.iterdir()) == [f"nvidia{i}" for i in range(8)]


def test_root_of_a_node_is_the_namespace_s_base_on_the_host(cluster: LocalCluster) -> None:
    cluster.up()
    id_map = cluster_id_map(cluster)
    prepare_cluster(cluster, id_map)
    node = cluster.node("n-0", "10.0.8.10")
    node.create(node_binds(node), id_map=id_map)
    init = node.init_pid()
    assert init is not None
    uids = next(line.split()[1:] for line in Path(f"/proc/{init}/status").read_text().splitlines()
                if line.startswith("Uid:"))
    assert set(uids) == {str(id_map.base)}
    inside = run(node.enter_argv(["sh", "-c", "id -u; stat -c '%u %a' /usr/bin/sudo /etc/passwd; "
                                  "touch /etc/made-by-root; cat /proc/self/uid_map"])).stdout.split("\n")
    assert inside[0] == "0"
    assert inside[1:3] == ["0 4755", "0 644"]  # the host's root's files are the node's root's, set-uid kept
    assert (node.dir / "etc" / "made-by-root").stat().st_uid == id_map.base
    assert inside[3].split() == ["0", str(id_map.base), "65536"]
    assert id_map.kept not in range(id_map.base, id_map.base + id_map.count)


def test_a_node_s_link_out_of_its_root_fails_its_boot_instead_of_being_followed(cluster: LocalCluster,
                                                                                 tmp_path: Path) -> None:
    # Root of a node may replace its /var/lib with a link to a path of the host's; at the next boot the
    # host's root, building the node's root, would have made and mounted its daemons' directories there.
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    cluster.up()
    id_map = cluster_id_map(cluster)
    prepare_cluster(cluster, id_map)
    node = cluster.node("n-0", "10.0.8.10")
    (node.dir / "var").mkdir(parents=True)
    (node.dir / "var" / "lib").symlink_to(host_dir)
    with pytest.raises(LocalHostError, match=r"/var/lib/.* leads out of the node.s root"):
        node.create(node_binds(node), id_map=id_map)
    assert list(host_dir.iterdir()) == []
