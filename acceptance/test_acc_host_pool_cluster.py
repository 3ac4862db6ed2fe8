"""gpucloud_gpu_cluster with `host_pool_id` (issue 32) against the real backend and Terraform 1.11, on a pool
of two hosts nobody listens on (so none is ever ready): every plan-time refusal names the attribute to
change, and the API refuses the same specs with the same field, so the plan and the apply never disagree.
Clusters that run on real servers are tests/backend/local/test_pool_clusters.py's."""

from __future__ import annotations

from typing import Any

import pytest

from acceptance.backend import Backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    plan_error,
    values,
)
from acceptance.harness.waiting import wait_until
from acceptance.test_acc_host_pool import api_pool, new_private_key
from provider.client import ApiError

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

POOL = """
resource "gpucloud_host_pool" "lab" {
  name                       = "lab"
  region                     = "on-prem"
  hosts                      = [{ address = "127.0.0.1", port = 1 }, { address = "127.0.0.1", port = 9 }]
  ssh_private_key_wo         = file("${path.module}/key")
  ssh_private_key_wo_version = 1
}
"""


def cluster(settings: str = "") -> str:
    return POOL + f"""
    resource "gpucloud_gpu_cluster" "own" {{
      name          = "own"
      region        = "on-prem"
      instance_type = "8xH200"
      node_count    = 2
      host_pool_id  = gpucloud_host_pool.lab.id
      {settings}
    }}
    """


def refused(backend: Backend, spec: dict[str, Any]) -> ApiError:
    """The API's answer to a create of the cluster `cluster()` configures, with `spec` on top."""
    key = "acc-" + "-".join(f"{k}.{v}" for k, v in sorted(spec.items()))
    with pytest.raises(ApiError) as caught:
        backend.client.create_cluster({"name": "own", "region": "on-prem", "instance_type": "8xH200",
                                       "node_count": 2, "orchestrator": "slurm", **spec}, idempotency_key=key)
    return caught.value


def fields(error: ApiError) -> set[str]:
    return {e["field"] for e in error.errors or []}


def test_acc_cluster_on_a_host_pool_is_refused_at_plan_as_the_api_refuses_it(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf("")
    new_private_key(tf, "key")
    tf.write_main(POOL)
    apply_and_check(tf)
    pool_id = values(tf, "gpucloud_host_pool.lab")["id"]
    wait_until(lambda: all(h["status"] == "unreachable" for h in api_pool(backend, pool_id)["hosts"]),
               lambda: str(api_pool(backend, pool_id)["hosts"]), seconds=60)
    tf.apply("-refresh-only")

    # What a pool cannot have: on the attribute, before the pool is even read.
    output = plan_error(tf_with(tf, cluster('capacity_type = "spot"')))
    assert "Not Offered On A Host Pool" in output and 'capacity_type = "spot"' in output
    assert "capacity_type cannot be set on a cluster on a host pool (host_pool_id)" in output
    error = refused(backend, {"host_pool_id": pool_id, "capacity_type": "spot"})
    assert (error.status, fields(error)) == (422, {"capacity_type"}), error.detail

    output = plan_error(tf_with(tf, cluster('orchestrator = "kubernetes"')))
    assert "run Slurm, not kubernetes: set orchestrator = \"slurm\"" in output

    # The pool's region (a name of the user's: the catalog's regions do not apply).
    elsewhere = cluster().replace('region        = "on-prem"', 'region = "eu-north-1"')
    output = plan_error(tf_with(tf, elsewhere))
    assert f'Host pool {pool_id} (lab) is in region on-prem; set region = "on-prem"' in output
    error = refused(backend, {"host_pool_id": pool_id, "region": "eu-north-1"})
    assert (error.status, fields(error)) == (422, {"region"}), error.detail

    # No host is ready: the plan says how many are free, the API answers 409 insufficient_capacity.
    output = plan_error(tf_with(tf, cluster()))
    assert f"The cluster needs 2 hosts of host pool {pool_id} (lab), which has 0 free" in output
    error = refused(backend, {"host_pool_id": pool_id})
    assert (error.status, error.code) == (409, "insufficient_capacity")

    # region and instance_type left out: the plan reads the pool all the same (the same refusal); the API
    # takes the pool's region and finds no ready server whose GPUs make a type. Without a pool: required.
    bare = "\n".join(line for line in cluster().splitlines()
                     if not line.lstrip().startswith(("region        =", "instance_type =")))
    output = plan_error(tf_with(tf, bare))
    assert f"The cluster needs 2 hosts of host pool {pool_id} (lab), which has 0 free" in output
    with pytest.raises(ApiError) as caught:
        backend.client.create_cluster({"name": "own", "node_count": 2, "host_pool_id": pool_id},
                                      idempotency_key="acc-no-type")
    assert (caught.value.status, fields(caught.value)) == (422, {"instance_type"}), caught.value.detail
    assert [e["code"] for e in caught.value.errors or []] == ["no_fitting_instance_type"]
    output = plan_error(tf_with(tf, bare.replace("host_pool_id  = gpucloud_host_pool.lab.id", "")))
    assert "region is required unless host_pool_id is set" in output
    assert "instance_type is required unless host_pool_id is set" in output

    tf.write_main(POOL)
    tf.destroy()


def tf_with(tf: Any, main_tf: str) -> Any:
    tf.write_main(main_tf)
    return tf
