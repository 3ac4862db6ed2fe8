"""gpucloud_reserved_ip against the real backend, real provider launch path and Terraform 1.11: a reserved
IP attached to a cluster, then moved to another cluster in place (Terraform updates both clusters in
parallel, detach and attach in either order), with an output following it; every plan after apply is
empty. tests/backend/engine/test_engine_reserved_ips.py checks both orders at the API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, values

__all__ = ["gpucloud_tf"]  # fixture used by the test below


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The engine at a fast simulation speed: clusters come up in about a second."""
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def config(holder: str) -> str:
    """A reserved IP, clusters `a` and `b`, the IP on `holder`'s login node and an output following it."""
    clusters = "".join(
        f"""
    resource "gpucloud_gpu_cluster" "{name}" {{
      name           = "ip-{name}"
      region         = "us-east-1"
      instance_type  = "1xH100"
      reserved_ip_id = {"gpucloud_reserved_ip.edge.id" if name == holder else "null"}
    }}
    output "{name}_host" {{ value = gpucloud_gpu_cluster.{name}.login.host }}
    """
        for name in ("a", "b")
    )
    return f"""
    resource "gpucloud_reserved_ip" "edge" {{
      region = "us-east-1"
      name   = "edge"
    }}
    output "edge_host" {{ value = gpucloud_gpu_cluster.{holder}.login.host }}
    {clusters}
    """


def test_acc_reserved_ip_moves_between_clusters_in_place(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(config(holder="a"))
    apply_and_check(tf)
    edge = values(tf, "gpucloud_reserved_ip.edge")
    ids = {name: values(tf, f"gpucloud_gpu_cluster.{name}")["id"] for name in ("a", "b")}
    out = tf.output_json()
    assert out["edge_host"]["value"] == out["a_host"]["value"] == edge["address"]
    assert out["b_host"]["value"] != edge["address"]

    tf.write_main(config(holder="b"))  # both clusters change in one apply, in place
    apply_and_check(tf)
    out = tf.output_json()
    assert out["edge_host"]["value"] == out["b_host"]["value"] == edge["address"]
    assert out["a_host"]["value"] not in (edge["address"], None)
    assert {name: values(tf, f"gpucloud_gpu_cluster.{name}")["id"] for name in ("a", "b")} == ids
    remote = backend.client.request("GET", f"/v1/reserved-ips/{edge['id']}").body
    assert remote["cluster_id"] == ids["b"] and remote["address"] == edge["address"]
    assert values(tf, "gpucloud_reserved_ip.edge")["id"] == edge["id"]

    tf.destroy()
    assert backend.client.request("GET", "/v1/reserved-ips").body["items"] == []
