"""gpucloud_gpu_cluster against the real backend (engine at a fast simulation speed), the provider installed
from the mirror and Terraform 1.11: lifecycles, scaling, volumes, drift, import, replace, disappears."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    gpucloud_tf,
    import_verify,
    new_public_key,
    plan_text,
    values,
)
from acceptance.harness import TerraformFactory, eventually
from provider.resources.cluster_wait import QUIET_CHANGE_GRACE_SECONDS

__all__ = ["gpucloud_tf"]

SLURM = "gpucloud_gpu_cluster.train"
PUBLIC_KEY = new_public_key("cluster@acc")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def slurm_config(*, nodes: int, volumes: str = "[gpucloud_shared_volume.data.id]",
                 labels: str = '{ team = "ml" }') -> str:
    return f"""
    resource "gpucloud_ssh_key" "me" {{
      name       = "me"
      public_key = "{PUBLIC_KEY}"
    }}

    resource "gpucloud_shared_volume" "data" {{
      name     = "data"
      region   = "us-east-1"
      size_tib = 1
    }}

    resource "gpucloud_shared_volume" "scratch" {{
      name     = "scratch"
      region   = "us-east-1"
      size_tib = 1
    }}

    resource "gpucloud_gpu_cluster" "train" {{
      name              = "train"
      region            = "us-east-1"
      instance_type     = "8xH100"
      node_count        = {nodes}
      ssh_key_ids       = [gpucloud_ssh_key.me.id]
      shared_volume_ids = {volumes}
      labels            = {labels}
    }}
    """


def test_acc_gpu_cluster_slurm_infiniband_scale_volumes_drift(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(slurm_config(nodes=2))
    code, output = plan_text(tf)
    # The cost is known at plan time, from the catalog: 2 nodes x 8 GPUs x 3.99 USD.
    assert code == 2 and "estimated_hourly_cost_usd = 63.84" in output, output
    apply_and_check(tf)
    state = values(tf, SLURM)
    remote = backend.client.get_cluster(state["id"])
    assert remote["status"] == "RUNNING" and state["status"] == "RUNNING"
    assert (state["orchestrator"], state["interconnect"], state["num_gpus"]) == ("slurm", "infiniband", 16)
    assert [n["name"] for n in state["nodes"]] == ["train-0", "train-1"]
    node = state["nodes"][0]
    assert node["hcas"] == [f"mlx5_{i}" for i in range(8)] and node["partition_key"].startswith("0x")
    assert state["slurm"]["partitions"] == ["gpu"] and state["login"]["ssh_command"].startswith("ssh ")
    assert state["nccl_env"]["NCCL_IB_HCA"].startswith("=mlx5_0")

    import_verify(tf, SLURM)

    # Scale up and attach a second volume, in place.
    tf.write_main(slurm_config(
        nodes=3, volumes="[gpucloud_shared_volume.data.id, gpucloud_shared_volume.scratch.id]"))
    code, output = plan_text(tf)
    assert code == 2 and "0 to add, 1 to change, 0 to destroy" in output
    assert "estimated_hourly_cost_usd = 63.84 -> 95.76" in output, output
    apply_and_check(tf)
    state = values(tf, SLURM)
    assert len(state["nodes"]) == 3 and all(n["status"] == "RUNNING" for n in state["nodes"])
    assert len(backend.client.get_cluster(state["id"])["volume_ids"]) == 2

    # Scale down in place. The wait ends as soon as the engine has released the node (no fixed grace
    # after the cluster is Ready), and INFO logs show each phase and node count once, not each request.
    both = "[gpucloud_shared_volume.data.id, gpucloud_shared_volume.scratch.id]"
    tf.write_main(slurm_config(nodes=2, volumes=both))
    logs = tf.run("apply", "-auto-approve", env={"TF_LOG_PROVIDER": "info"}).stderr
    waited = [int(s) for s in re.findall(r"gpu cluster \S+: converged in (\d+)s", logs)]
    assert waited and waited[-1] < QUIET_CHANGE_GRACE_SECONDS, logs
    progress = [re.sub(r", \d+s elapsed.*", "", line)
                for line in re.findall(r"gpu cluster \S+: [A-Z_]+, phase .*", logs)]
    assert any("RUNNING, phase Ready, 2/2 nodes running" in line for line in progress), logs
    assert all(a != b for a, b in itertools.pairwise(progress)), progress  # once per change
    assert "/v1/clusters" not in logs  # requests are logged at DEBUG
    tf.assert_plan_empty()

    # Detach, in place.
    tf.write_main(slurm_config(nodes=2, volumes="[gpucloud_shared_volume.scratch.id]"))
    apply_and_check(tf)
    remote = backend.client.get_cluster(state["id"])
    assert remote["node_count"] == 2 and len(remote["nodes"]) == 2
    assert remote["volume_ids"] == [values(tf, "gpucloud_shared_volume.scratch")["id"]]

    # Drift: labels and node count changed outside Terraform show in the plan.
    backend.client.update_cluster(state["id"], {"labels": {"owner": "ops"}, "node_count": 1})
    code, output = plan_text(tf)
    assert code == 2 and '"owner" = "ops" -> null' in output and "node_count = 1 -> 2" in output, output

    tf.destroy()
    assert all(c["id"] != state["id"] for c in backend.client.list_clusters())


def single_config(*, region: str = "us-east-1", container: str = "pytorch") -> str:
    return f"""
    resource "gpucloud_gpu_cluster" "box" {{
      name          = "box"
      region        = "{region}"
      instance_type = "1xH100"
      container     = "{container}"
    }}
    """


def test_acc_gpu_cluster_single_node_container_replace_disappears(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(single_config())
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.box")
    assert (state["orchestrator"], state["interconnect"], state["num_gpus"]) == ("none", "ethernet", 1)
    assert state["nodes"][0]["role"] == "standalone" and state["slurm"] is None

    # The container changes in place.
    tf.write_main(single_config(container="base"))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change" in output
    apply_and_check(tf)
    assert backend.client.get_cluster(state["id"])["container"] == "base"

    # A new region replaces the cluster.
    tf.write_main(single_config(region="us-west-2", container="base"))
    code, output = plan_text(tf)
    assert code == 2 and "forces replacement" in output and "1 to add, 0 to change, 1 to destroy" in output
    apply_and_check(tf)
    new_id = values(tf, "gpucloud_gpu_cluster.box")["id"]
    assert new_id != state["id"]
    assert {c["id"] for c in backend.client.list_clusters()} >= {new_id}
    assert state["id"] not in {c["id"] for c in backend.client.list_clusters()}

    # Deleted outside Terraform: the next plan re-creates it.
    backend.client.delete_cluster(new_id)
    code, output = plan_text(tf)
    assert code == 2 and "1 to add, 0 to change, 0 to destroy" in output

    tf.destroy()
    assert eventually(lambda: not [c for c in backend.client.list_clusters() if c["name"] == "box"])


def test_acc_gpu_cluster_import_block_generates_config_that_plans_clean(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    made = backend.client.create_cluster(
        {"name": "found", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
         "labels": {"origin": "console"}},
        idempotency_key="acc-import-block",
    )
    assert eventually(lambda: backend.client.get_cluster(made["id"])["status"] == "RUNNING")
    tf = gpucloud_tf(f"""
    import {{
      to = gpucloud_gpu_cluster.found
      id = "{made["id"]}"
    }}
    """)
    tf.plan("-generate-config-out=generated.tf")
    generated = " ".join((tf.workdir / "generated.tf").read_text().split())
    assert 'instance_type = "8xH100"' in generated and "node_count = 2" in generated
    tf.apply()
    tf.assert_plan_empty()
    assert values(tf, "gpucloud_gpu_cluster.found")["labels"] == {"origin": "console"}
    tf.destroy()
    assert eventually(lambda: made["id"] not in {c["id"] for c in backend.client.list_clusters()})


QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "terraform" / "quickstart" / "main.tf"


def test_acc_gpu_cluster_quickstart_example_applies_and_plans_clean(
    terraform: TerraformFactory, backend: Backend
) -> None:
    tf = terraform("1.11")
    tf.env.update(backend.provider_env)
    tf.write_main(QUICKSTART.read_text())
    tf.init()
    apply_and_check(tf)
    outputs = {name: item["value"] for name, item in tf.output_json().items()}
    assert outputs["ssh_command"].startswith("ssh ubuntu@")
    assert sorted(outputs["nodes"]) == ["quickstart-0", "quickstart-1"]
    assert outputs["slurm_partition"] == "gpu" and outputs["hourly_cost_usd"] == 63.84
    tf.destroy()
    assert eventually(lambda: not [c for c in backend.client.list_clusters() if c["name"] == "quickstart"])
