"""The NCCL / libfabric environment a cluster publishes for its interconnect."""

from __future__ import annotations

from backend.domain.catalog import InstanceType

BOOTSTRAP_INTERFACE = "eth0"
EFA_PRIMARY_INTERFACE = "ens32"


def nccl_env(interconnect: str, itype: InstanceType) -> dict[str, str]:
    if interconnect == "infiniband":
        # "=" prefix: exact device names, so the storage HCAs (mlx5_8, mlx5_9) are never used for NCCL.
        devices = ",".join(f"mlx5_{rail}" for rail in range(itype.hca_count))
        return {
            "NCCL_IB_HCA": f"={devices}",
            "NCCL_SOCKET_IFNAME": f"={BOOTSTRAP_INTERFACE}",
            "NCCL_IB_TIMEOUT": "22",
            "NCCL_IB_RETRY_CNT": "14",
        }
    if interconnect == "efa":
        return {
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1",
            "RDMAV_FORK_SAFE": "1",
            "NCCL_PROTO": "simple",
            "NCCL_SOCKET_IFNAME": EFA_PRIMARY_INTERFACE,
        }
    return {"NCCL_SOCKET_IFNAME": f"={BOOTSTRAP_INTERFACE}"}
