"""Kubernetes control-plane credentials, node objects and the admin kubeconfig of a cluster."""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from backend.fabric.layout import ClusterLayout

API_PORT = 6443
PRODUCT_LABELS = {"h100": "NVIDIA-H100-80GB-HBM3", "h200": "NVIDIA-H200", "b200": "NVIDIA-B200"}


def new_control_plane_credentials(cluster_name: str, now: dt.datetime) -> tuple[str, str]:
    """A fresh cluster CA certificate (PEM) and an admin bearer token. The CA key stays in the control
    plane; only the certificate (public) and the token are kept by the cloud."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster_name}-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), secrets.token_urlsafe(32)


def api_endpoint(layout: ClusterLayout) -> str:
    return f"https://{layout.public_ip or layout.controller_ip}:{API_PORT}"


def node_objects(layout: ClusterLayout, node_networks: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """v1 Node objects as the GPU operator / network operator would label them."""
    itype = layout.instance_type
    out = []
    for node in sorted(layout.nodes, key=lambda n: n.index):
        network = node_networks.get(node.name, {})
        labels = {
            "kubernetes.io/hostname": node.name,
            "node.kubernetes.io/instance-type": itype.name,
            "topology.kubernetes.io/region": layout.region,
            "nvidia.com/gpu.product": PRODUCT_LABELS.get(itype.gpu_short_name, itype.gpu_model),
            "nvidia.com/gpu.count": str(itype.gpu_count),
            "nvidia.com/gpu.memory": str(itype.gpu_memory_mib),
            "gpucloud.io/fabric": layout.fabric.name,
            "gpucloud.io/interconnect": layout.interconnect,
            "gpucloud.io/scalable-unit": f"su{node.scalable_unit:02d}",
            "gpucloud.io/tier-1-leaf-group": f"{layout.fabric.name}-su{node.scalable_unit:02d}",
            "gpucloud.io/tier-2-spine-group": f"{layout.fabric.name}-spines",
        }
        capacity = {"nvidia.com/gpu": str(itype.gpu_count), "cpu": str(itype.vcpu),
                    "memory": f"{itype.ram_gib}Gi"}
        if layout.interconnect == "infiniband":
            capacity["rdma/ib"] = str(itype.hca_count)
            if network.get("partition_key"):
                labels["gpucloud.io/ib-partition"] = str(network["partition_key"])
        elif layout.interconnect == "efa":
            capacity["vpc.amazonaws.com/efa"] = str(itype.efa_interfaces)
        out.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": labels},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "addresses": [{"type": "InternalIP", "address": node.private_ip},
                              {"type": "Hostname", "address": node.name}],
            },
        })
    return out


def kubeconfig(layout: ClusterLayout, ca_cert_pem: str, token: str) -> str:
    """The admin kubeconfig (YAML; JSON strings are valid YAML scalars)."""
    ca = base64.b64encode(ca_cert_pem.encode()).decode()
    user = f"{layout.name}-admin"
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: {json.dumps(layout.name)}\n"
        "  cluster:\n"
        f"    server: {json.dumps(api_endpoint(layout))}\n"
        f"    certificate-authority-data: {ca}\n"
        "users:\n"
        f"- name: {json.dumps(user)}\n"
        "  user:\n"
        f"    token: {json.dumps(token)}\n"
        "contexts:\n"
        f"- name: {json.dumps(layout.name)}\n"
        "  context:\n"
        f"    cluster: {json.dumps(layout.name)}\n"
        f"    user: {json.dumps(user)}\n"
        f"current-context: {json.dumps(layout.name)}\n"
    )
