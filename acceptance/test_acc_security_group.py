"""gpucloud_security_group against the real backend (engine at a fast simulation speed), the real provider
launch path and Terraform 1.11: a group attached to a cluster, a rule changed in place (the group and the
cluster keep their ids, the cluster's nodes are reconfigured), then detached in place; every plan after an
apply empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_text, values

__all__ = ["gpucloud_tf"]  # fixture used by the test below

GROUP = "gpucloud_security_group.lab"
CLUSTER = "gpucloud_gpu_cluster.box"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def config(ssh_cidr: str, attached: bool = True) -> str:
    groups = "[gpucloud_security_group.lab.id]" if attached else "[]"
    return f"""
    resource "gpucloud_security_group" "lab" {{
      name    = "lab"
      ingress = [
        {{ protocol = "tcp", from_port = 22, cidr_blocks = ["{ssh_cidr}"], description = "SSH" }},
        {{ protocol = "icmp", cidr_blocks = ["0.0.0.0/0"] }},
      ]
      egress = [{{ protocol = "all", cidr_blocks = ["0.0.0.0/0"] }}]
    }}

    resource "gpucloud_gpu_cluster" "box" {{
      name               = "box"
      region             = "us-east-1"
      instance_type      = "1xH100"
      security_group_ids = {groups}
    }}
    """


def test_acc_security_group_rule_change_applies_in_place(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(config("203.0.113.0/24"))
    apply_and_check(tf)
    group, cluster = values(tf, GROUP), values(tf, CLUSTER)
    assert cluster["security_group_ids"] == [group["id"]] and group["is_default"] is False
    remote = backend.client.request("GET", f"/v1/security-groups/{group['id']}").body
    assert remote["cluster_ids"] == [cluster["id"]]
    assert remote["ingress"][0]["cidr_blocks"] == ["203.0.113.0/24"]

    tf.write_main(config("198.51.100.0/24"))
    code, output = plan_text(tf)
    assert code == 2 and "0 to add, 1 to change, 0 to destroy" in output, output
    apply_and_check(tf)
    assert values(tf, GROUP)["id"] == group["id"] and values(tf, CLUSTER)["id"] == cluster["id"]
    remote = backend.client.request("GET", f"/v1/security-groups/{group['id']}").body
    assert remote["ingress"][0]["cidr_blocks"] == ["198.51.100.0/24"]

    # Detached: the cluster changes in place and falls back to the project's default group.
    tf.write_main(config("198.51.100.0/24", attached=False))
    apply_and_check(tf)
    assert values(tf, CLUSTER)["id"] == cluster["id"]
    groups = backend.client.request("GET", "/v1/security-groups").body["items"]
    assert [g["cluster_ids"] for g in groups if g["is_default"]] == [[cluster["id"]]]
