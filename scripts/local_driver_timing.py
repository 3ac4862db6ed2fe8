"""Time the `local` driver (root, Linux, Debian's daemons): one 2-node Slurm cluster from the create request
to RUNNING (namespaces booted, nodes configured, every slurmd registered and idle), then its delete; and the
cost of one command run in a node from the host, by `nsenter` and by the node transport (SSH).

    flock /tmp/gpucloud-local-driver.lock .venv/bin/python scripts/local_driver_timing.py [--rounds 3]

Figures go to docs/local-driver.md ("Design notes and limits").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acceptance.backend import running_backend
from backend.provisioning.drivers.local import preflight
from backend.provisioning.drivers.local.namespaces import LocalCluster
from provider.client import GpuCloudClient


def _median_ms(command: list[str], count: int = 30) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _wait_status(client: GpuCloudClient, cluster_id: str, wanted: tuple[str, ...], seconds: float = 300
                 ) -> str:
    """Poll the cluster until its status is one of `wanted` ("DELETED": until it is gone)."""
    deadline = time.monotonic() + seconds
    while True:
        found = [c["status"] for c in client.list_clusters() if c["id"] == cluster_id] or ["DELETED"]
        if found[0] in wanted:
            return str(found[0])
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {wanted}: {found[0]}")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    free = [cidr for cidr in ("10.0.0.0/16", "172.31.0.0/16", "192.168.224.0/19")
            if preflight.conflicting_route(cidr) is None]
    os.environ.update(GPUCLOUD_DRIVER="local", GPUCLOUD_LOCAL_ADDRESS_RANGE=free[0])
    root = Path("/var/tmp") / f"gpucloud-timing-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    keys = Path(tempfile.mkdtemp())
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "k")], check=True)
    creates, deletes = [], []
    try:
        with running_backend(root) as backend:
            client = backend.client
            key = client.create_ssh_key(name="timing", public_key=(keys / "k.pub").read_text(),
                                        idempotency_key=uuid.uuid4().hex)
            for index in range(rounds):
                started = time.monotonic()
                cluster = client.create_cluster(
                    {"name": f"t{index}", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
                     "orchestrator": "slurm", "ssh_key_ids": [key["id"]]}, idempotency_key=uuid.uuid4().hex)
                _wait_status(client, cluster["id"], ("RUNNING", "FAILED"))
                body = client.get_cluster(cluster["id"])
                assert body["status"] == "RUNNING", body["status_reason"]
                creates.append(time.monotonic() - started)
                if index == 0:
                    local = LocalCluster(root / "local", cluster["id"], body["fabric"]["subnet"])
                    jumphost = local.node(f"t{index}-jumphost", body["login"]["public_ip"])
                    print(f"one command in a node (median of 30): nsenter "
                          f"{_median_ms(jumphost.enter_argv(['true'])):.1f} ms")
                    _transport_latency(local, jumphost.name, jumphost.address)
                started = time.monotonic()
                client.delete_cluster(cluster["id"])
                _wait_status(client, cluster["id"], ("DELETED",))
                deletes.append(time.monotonic() - started)
    finally:
        subprocess.run(["umount", str(root / "local" / "ns")], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(root), str(keys)], check=False)
    print("2-node Slurm create to RUNNING (s):", " ".join(f"{s:.1f}" for s in creates),
          f"median {statistics.median(creates):.1f}")
    print("delete to gone (s):", " ".join(f"{s:.1f}" for s in deletes),
          f"median {statistics.median(deletes):.1f}")
    return 0


def _transport_latency(local: LocalCluster, name: str, address: str) -> None:
    try:
        from backend.provisioning.drivers.local.node_setup import node_shell
    except ImportError:  # the driver before the SSH transport
        return
    shell = node_shell(local, name, address)
    shell.close()
    started = time.perf_counter()
    shell.run(["true"])
    first = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(30):
        started = time.perf_counter()
        shell.run(["true"])
        times.append((time.perf_counter() - started) * 1000)
    print(f"one command over the node transport: first (new connection) {first:.0f} ms, "
          f"then median of 30 {statistics.median(times):.1f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
