"""Stand-in servers for host pool tests: namespaces with a root of their own (the local driver's boot code) on
one bridge, whose sshd lets root in with the pool's key from anywhere, as a rented server's would, and reads
drop-ins from `/etc/ssh/sshd_config.d` as Debian's does. The first may carry an `nvidia-smi` that answers with
a real H200 node's output (tests/backend/node_agent/data).

Needs root and `ip netns` (.ci/run); every address lives inside namespaces the caller makes.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy as copy_element
from dataclasses import dataclass, replace
from ipaddress import ip_network
from pathlib import Path
from xml.etree import ElementTree

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from backend.provisioning.drivers.local.driver import tear_down
from backend.provisioning.drivers.local.namespaces import Bind, LocalCluster, LocalNode
from backend.provisioning.drivers.local.node_setup import BOOT_DIR, node_binds, prepare_cluster, start_sshd
from backend.provisioning.drivers.ssh_hosts.host_check import HostTarget

SHARED_MOUNT = "/srv/shared"  # the stand-ins' shared file system
RECORDED_XML = Path(__file__).parents[1] / "node_agent" / "data" / "nvidia-smi-q.xml"
SSHD_CONFIG = f"""\
Include /etc/ssh/sshd_config.d/*.conf
Port 22
ListenAddress 0.0.0.0
HostKey {BOOT_DIR}/ssh_host_ed25519_key
AuthorizedKeysFile {BOOT_DIR}/authorized_keys/%u
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
PidFile /run/sshd/sshd.pid
"""


def private_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def openssh(key: ed25519.Ed25519PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()


def public(key: ed25519.Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


@dataclass(frozen=True)
class StandIns:
    bridge: LocalCluster
    nodes: dict[str, LocalNode]
    private_key: str
    host_key: str  # `ssh-ed25519 AAAA...` every stand-in presents
    shared: Path  # the directory every stand-in mounts at SHARED_MOUNT

    def target(self, name: str, **changes: object) -> HostTarget:
        base = HostTarget(
            address=self.nodes[name].address,
            port=22,
            user="root",
            private_key=self.private_key,
            host_key=None,
        )
        return replace(base, **changes)  # type: ignore[arg-type]


def wait_for_sshd(address: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((address, 22)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"sshd on {address} did not answer")


def _recorded_gpus(root: Path, count: int) -> list[Bind]:
    """An `nvidia-smi` on the host's PATH that answers `-q -x` with a real H200 node's output, its GPU
    repeated `count` times (each with its own bus id, uuid and minor number): the inventory path of a GPU
    server, without its GPUs."""
    tools = root / f"gpu-tools-{count}"
    if tools.exists():
        return [Bind(tools, "/usr/local/bin", read_only=True)]
    tools.mkdir(parents=True)
    _multiply_gpus(RECORDED_XML, tools / "nvidia-smi-q.xml", count)
    script = tools / "nvidia-smi"
    script.write_text('#!/bin/sh\n[ "$*" = "-q -x" ] && exec cat /usr/local/bin/nvidia-smi-q.xml\nexit 9\n')
    script.chmod(0o755)
    return [Bind(tools, "/usr/local/bin", read_only=True)]


def _gpu_device_files(node: LocalNode, count: int) -> None:
    """/dev/nvidia0.. as a GPU server has them (character devices with NVIDIA's major number, never opened:
    Slurm only looks for the files gres.conf names)."""
    script = f"for i in $(seq 0 {count - 1}); do mknod -m 666 /dev/nvidia$i c 195 $i; done"
    subprocess.run(node.enter_argv(["sh", "-c", script]), check=True, capture_output=True, timeout=30)


def _multiply_gpus(source: Path, target: Path, count: int) -> None:
    tree = ElementTree.parse(source)
    log = tree.getroot()
    gpu = log.find("gpu")
    assert gpu is not None
    log.remove(gpu)
    log.append(gpu)  # the recorded GPU first, as it was
    for index in range(1, count):
        copy = copy_element(gpu)
        bus = f"00000000:{index + 6:02X}:00.0"
        copy.set("id", bus)
        changes = {"uuid": f"GPU-16d21506-2e18-0481-34e3-{index:012x}", "minor_number": str(index),
                   "pci/pci_bus_id": bus}
        for path, value in changes.items():
            found = copy.find(path)
            if found is not None:
                found.text = value
        log.append(copy)
    attached = log.find("attached_gpus")
    if attached is not None:
        attached.text = str(count)
    tree.write(target)


@contextmanager
def stand_in_hosts(subnet: str, names: tuple[str, ...], *, gpu_hosts: tuple[str, ...] = (),
                   gpus: int = 1, systemd_hosts: tuple[str, ...] = ()) -> Iterator[StandIns]:
    """Servers `names` at the subnet's addresses .11, .12, ...; `gpu_hosts` have an nvidia-smi that reports
    `gpus` H200s (from the recorded output); `systemd_hosts` boot systemd as their init, as most servers do.
    Every server mounts one shared file system at `SHARED_MOUNT` (a directory of the host's, as an NFS
    export would be)."""
    root = Path("/var/tmp") / f"gpucloud-hosts-test-{uuid.uuid4().hex[:8]}"
    bridge = LocalCluster(root, f"h{uuid.uuid4().hex[:6]}", subnet)
    key = private_key()
    first = ip_network(subnet).network_address + 11
    (root / "shared").mkdir(parents=True)
    try:
        bridge.up()
        prepare_cluster(bridge)
        boot = bridge.dir / "ssh"
        (boot / "sshd_config").write_text(SSHD_CONFIG)
        (boot / "authorized_keys" / "root").write_text(public(key) + "\n")
        nodes = {name: bridge.node(name, str(first + index)) for index, name in enumerate(names)}
        for name, node in nodes.items():
            shared = [Bind(root / "shared", SHARED_MOUNT)]
            node.create(node_binds(node) + shared + (_recorded_gpus(root, gpus) if name in gpu_hosts else []),
                        systemd=name in systemd_hosts)
            start_sshd(node)
            wait_for_sshd(node.address)
            if name in gpu_hosts:
                _gpu_device_files(node, gpus)
        host_key = " ".join((boot / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        yield StandIns(bridge, nodes, openssh(key), host_key, root / "shared")
    finally:
        tear_down(bridge)
        subprocess.run(["rm", "-rf", str(root)], check=False)
