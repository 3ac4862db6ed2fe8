"""Terraform's own configuration features with gpucloud clusters, against the real backend (Terraform 1.11):
`count` and `for_each`, `moved {}` (no change), `removed {}` with `destroy = false` (forgotten, not
destroyed), and `lifecycle { ignore_changes, prevent_destroy, replace_triggered_by }` as Terraform
documents them. Single-node 1xH100 clusters throughout: the scenarios need nothing bigger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import PROVIDER_BLOCK, plan_error, plan_text
from acceptance.harness import Terraform
from acceptance.workflow_steps import MODULE_DIR, cluster_named, eventually, gone, state_values


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def workdir(provider_mirror: Path, backend: Backend, directory: Path) -> Terraform:
    tf = Terraform(directory, version="1.11", mirror=provider_mirror, env=backend.provider_env)
    tf.write("provider.tf", PROVIDER_BLOCK)
    return tf


MODULE_LABELS = '{ team = "named", "managed-by" = "terraform", module = "gpu-training-cluster" }'
VARIABLES = """
variable "pool_size" {
  type = number
}

variable "names" {
  type = set(string)
}
"""


def moved_config(solo: str) -> str:
    """named["b"] lives in the shared module (which names it named-b and sets the same labels); the
    pool's cluster is `solo`, given as a resource block or a `removed` block."""
    return f"""{VARIABLES}
{solo}

resource "gpucloud_gpu_cluster" "named" {{
  for_each      = setsubtract(var.names, ["b"])
  name          = "named-${{each.key}}"
  region        = "us-east-1"
  instance_type = "1xH100"
  labels        = {MODULE_LABELS}
}}

module "b" {{
  source        = "{MODULE_DIR}"
  team          = "named"
  name          = "b"
  instance_type = "1xH100"
  orchestrator  = "none"
}}

moved {{
  from = gpucloud_gpu_cluster.pool[0]
  to   = gpucloud_gpu_cluster.solo
}}

moved {{
  from = gpucloud_gpu_cluster.named["b"]
  to   = module.b.gpucloud_gpu_cluster.this
}}
"""


SOLO = """
resource "gpucloud_gpu_cluster" "solo" {
  name          = "pool-0"
  region        = "us-east-1"
  instance_type = "1xH100"
}
"""

FORGET_SOLO = """
removed {
  from = gpucloud_gpu_cluster.solo

  lifecycle {
    destroy = false
  }
}
"""


def test_acc_workflows_count_for_each_moved_removed(
    provider_mirror: Path, backend: Backend, tmp_path: Path
) -> None:
    tf = workdir(provider_mirror, backend, tmp_path / "root")
    tf.write_main(VARIABLES + f"""
resource "gpucloud_gpu_cluster" "pool" {{
  count         = var.pool_size
  name          = "pool-${{count.index}}"
  region        = "us-east-1"
  instance_type = "1xH100"
}}

resource "gpucloud_gpu_cluster" "named" {{
  for_each      = var.names
  name          = "named-${{each.key}}"
  region        = "us-east-1"
  instance_type = "1xH100"
  labels        = {MODULE_LABELS}
}}
""")
    tf.write("terraform.tfvars", 'pool_size = 2\nnames = ["a", "b"]\n')
    tf.init()
    tf.apply()
    tf.assert_plan_empty()
    before = state_values(tf)
    for address, name in (("gpucloud_gpu_cluster.pool[0]", "pool-0"),
                          ("gpucloud_gpu_cluster.pool[1]", "pool-1"),
                          ('gpucloud_gpu_cluster.named["a"]', "named-a"),
                          ('gpucloud_gpu_cluster.named["b"]', "named-b")):
        remote = cluster_named(backend, name)
        assert remote is not None and remote["id"] == before[address]["id"], address

    # Shrinking count destroys the last instance; a new for_each key adds one, a dropped key destroys
    # one, and the instances whose index or key stays are untouched.
    tf.write("terraform.tfvars", 'pool_size = 1\nnames = ["b", "c"]\n')
    code, output = plan_text(tf)
    assert code == 2 and "Plan: 1 to add, 0 to change, 2 to destroy." in output, output
    assert "gpucloud_gpu_cluster.pool[1] will be destroyed" in output
    assert 'gpucloud_gpu_cluster.named["a"] will be destroyed' in output
    assert 'gpucloud_gpu_cluster.named["c"] will be created' in output
    tf.apply()
    tf.assert_plan_empty()
    after = state_values(tf)
    for kept in ('gpucloud_gpu_cluster.named["b"]', "gpucloud_gpu_cluster.pool[0]"):
        assert after[kept]["id"] == before[kept]["id"], kept
    assert gone(backend, "pool-1") and gone(backend, "named-a")

    # moved {}: pool[0] becomes a standalone resource and named["b"] moves into the shared module:
    # the plan only moves them.
    tf.write_main(moved_config(SOLO))
    tf.init()
    code, output = plan_text(tf)
    assert "gpucloud_gpu_cluster.pool[0] has moved to gpucloud_gpu_cluster.solo" in output, output
    assert 'gpucloud_gpu_cluster.named["b"] has moved to module.b.gpucloud_gpu_cluster.this' in output
    assert "Plan: 0 to add, 0 to change, 0 to destroy." in output, output
    tf.apply()
    tf.assert_plan_empty()
    moved = state_values(tf)
    assert moved["gpucloud_gpu_cluster.solo"]["id"] == before["gpucloud_gpu_cluster.pool[0]"]["id"]
    named_b = before['gpucloud_gpu_cluster.named["b"]']["id"]
    assert moved["module.b.gpucloud_gpu_cluster.this"]["id"] == named_b

    # removed {} with destroy = false: Terraform forgets the cluster, the backend keeps it running.
    solo_id = moved["gpucloud_gpu_cluster.solo"]["id"]
    tf.write_main(moved_config(FORGET_SOLO))
    code, output = plan_text(tf)
    assert "gpucloud_gpu_cluster.solo will no longer be managed by Terraform" in output, output
    assert "0 to destroy" in output, output
    tf.apply()
    assert "gpucloud_gpu_cluster.solo" not in state_values(tf)
    tf.assert_plan_empty()
    tf.destroy()
    assert gone(backend, "named-c") and gone(backend, "named-b")
    kept_cluster = backend.client.get_cluster(solo_id)
    assert kept_cluster["status"] == "RUNNING" and kept_cluster["name"] == "pool-0"


def test_acc_workflows_lifecycle_ignore_prevent_replace(
    provider_mirror: Path, backend: Backend, tmp_path: Path
) -> None:
    tf = workdir(provider_mirror, backend, tmp_path / "root")

    def config(*, labels: str, image: str, region: str = "us-east-1", prevent: bool = True) -> str:
        return f"""
        resource "terraform_data" "image" {{
          input = "{image}"
        }}

        resource "gpucloud_gpu_cluster" "guarded" {{
          name          = "guarded"
          region        = "{region}"
          instance_type = "1xH100"
          labels        = {labels}

          lifecycle {{
            ignore_changes  = [labels]
            prevent_destroy = {str(prevent).lower()}
          }}
        }}

        resource "gpucloud_gpu_cluster" "worker" {{
          name          = "worker"
          region        = "us-east-1"
          instance_type = "1xH100"

          lifecycle {{
            replace_triggered_by = [terraform_data.image]
          }}
        }}
        """

    tf.write_main(config(labels='{ owner = "ml" }', image="v1"))
    tf.init()
    tf.apply()
    tf.assert_plan_empty()
    guarded = state_values(tf)["gpucloud_gpu_cluster.guarded"]
    worker_id = state_values(tf)["gpucloud_gpu_cluster.worker"]["id"]

    # ignore_changes: labels changed out of band, or in the configuration, plan no change.
    backend.client.update_cluster(guarded["id"], {"labels": {"owner": "ops"}})
    tf.assert_plan_empty("-refresh=true")
    tf.write_main(config(labels='{ owner = "research" }', image="v1"))
    code, output = plan_text(tf)
    assert code == 0, output

    # prevent_destroy: a change that replaces the cluster is refused at plan time, nothing touched.
    tf.write_main(config(labels='{ owner = "research" }', image="v1", region="us-west-2"))
    error = plan_error(tf)
    assert "Instance cannot be destroyed" in error and "gpucloud_gpu_cluster.guarded" in error, error
    assert backend.client.get_cluster(guarded["id"])["status"] == "RUNNING"

    # replace_triggered_by: a new image version replaces the worker, and only the worker.
    tf.write_main(config(labels='{ owner = "research" }', image="v2"))
    code, output = plan_text(tf)
    replaced = "gpucloud_gpu_cluster.worker will be replaced due to changes in replace_triggered_by"
    assert code == 2 and replaced in output, output
    assert "Plan: 1 to add, 1 to change, 1 to destroy." in output, output
    tf.apply()
    tf.assert_plan_empty()
    values = state_values(tf)
    assert values["gpucloud_gpu_cluster.worker"]["id"] != worker_id
    assert values["gpucloud_gpu_cluster.guarded"]["id"] == guarded["id"]
    assert gone_id(backend, worker_id)

    # prevent_destroy refuses `terraform destroy` too; lifting it lets destroy proceed.
    refused = tf.destroy(check=False)
    assert refused.returncode == 1 and "Instance cannot be destroyed" in " ".join(refused.output.split())
    assert backend.client.get_cluster(guarded["id"])["status"] == "RUNNING"
    tf.write_main(config(labels='{ owner = "research" }', image="v2", prevent=False))
    tf.destroy()
    assert gone(backend, "guarded") and gone(backend, "worker")


def gone_id(backend: Backend, cluster_id: str) -> bool:
    return eventually(lambda: cluster_id not in {c["id"] for c in backend.client.list_clusters()})
