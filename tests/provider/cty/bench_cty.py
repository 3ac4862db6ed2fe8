"""Quick benchmark (not a test): msgpack round trip of 200 cluster-sized resource states.

Run: .venv/bin/python tests/provider/cty/bench_cty.py
"""

from __future__ import annotations

import time
from decimal import Decimal

from provider.cty import (
    BOOL,
    NUMBER,
    STRING,
    UNKNOWN,
    List,
    Map,
    Object,
    Set,
    decode_msgpack,
    encode_msgpack,
)

NODE = Object(
    {
        "name": STRING,
        "instance_id": STRING,
        "role": STRING,
        "status": STRING,
        "private_ip": STRING,
        "public_ip": STRING,
        "partition_key": STRING,
        "hcas": List(STRING),
    }
)
CLUSTER = Object(
    {
        "id": STRING,
        "name": STRING,
        "region": STRING,
        "instance_type": STRING,
        "node_count": NUMBER,
        "orchestrator": STRING,
        "interconnect": STRING,
        "ssh_key_ids": Set(STRING),
        "shared_volume_ids": Set(STRING),
        "labels": Map(STRING),
        "deletion_protection": BOOL,
        "max_hourly_cost_usd": NUMBER,
        "wait_for_running": BOOL,
        "status": STRING,
        "phase": STRING,
        "num_gpus": NUMBER,
        "gpu_type": STRING,
        "created_at": STRING,
        "nodes": List(NODE),
        "login": Object({"host": STRING, "port": NUMBER, "user": STRING, "ssh_command": STRING}),
        "nccl_env": Map(STRING),
        "estimated_hourly_cost_usd": NUMBER,
        "timeouts": Object({"create": STRING, "update": STRING, "delete": STRING}, optional={"update"}),
    }
)


def cluster(i: int, unknown: bool) -> dict[str, object]:
    nodes = [
        {
            "name": f"node-{i}-{n}",
            "instance_id": f"i-{i:04d}{n:02d}",
            "role": "worker" if n else "controller",
            "status": "RUNNING",
            "private_ip": f"10.0.{i % 250}.{n}",
            "public_ip": None,
            "partition_key": "0x8001",
            "hcas": [f"mlx5_{k}" for k in range(8)],
        }
        for n in range(2)
    ]
    return {
        "id": UNKNOWN if unknown else f"cl-{i:06d}",
        "name": f"cluster-{i}",
        "region": "us-east-1",
        "instance_type": "8xH100-80G-SXM",
        "node_count": 2,
        "orchestrator": "slurm",
        "interconnect": "infiniband",
        "ssh_key_ids": ["key-1", "key-2"],
        "shared_volume_ids": ["vol-1"],
        "labels": {"team": "ml", "env": "prod", "cost-center": str(i)},
        "deletion_protection": False,
        "max_hourly_cost_usd": Decimal("99.5"),
        "wait_for_running": True,
        "status": UNKNOWN if unknown else "RUNNING",
        "phase": "ready",
        "num_gpus": 16,
        "gpu_type": "H100",
        "created_at": "2026-11-26T01:00:00Z",
        "nodes": UNKNOWN if unknown else nodes,
        "login": {"host": "1.2.3.4", "port": 22, "user": "ubuntu", "ssh_command": "ssh ubuntu@1.2.3.4"},
        "nccl_env": {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0"},
        "estimated_hourly_cost_usd": Decimal("63.84"),
        "timeouts": {"create": "2h", "delete": None},
    }


def main() -> None:
    states = [cluster(i, unknown=i % 4 == 0) for i in range(200)]
    encode_msgpack(states[0], CLUSTER)  # compile the codecs once, as the first RPC would
    rounds = 20
    start = time.perf_counter()
    for _ in range(rounds):
        blobs = [encode_msgpack(s, CLUSTER) for s in states]
    encoded = time.perf_counter()
    for _ in range(rounds):
        decoded = [decode_msgpack(b, CLUSTER) for b in blobs]
    done = time.perf_counter()
    assert decoded[1]["nodes"][1]["hcas"][7] == "mlx5_7"
    size = sum(map(len, blobs))
    print(
        f"200 cluster states ({size} bytes): encode {(encoded - start) / rounds * 1e3:.2f} ms, "
        f"decode {(done - encoded) / rounds * 1e3:.2f} ms, round trip {(done - start) / rounds * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
