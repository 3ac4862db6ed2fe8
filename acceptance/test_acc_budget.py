"""Cost governance against the real backend, real provider launch path and Terraform: gpucloud_budget
created with its defaults, updated in place, imported, a bad amount refused at plan time, destroyed; a
project quota set with `gpucloud-backend set-quota`, read by gpucloud_quota and failing a plan past it."""

from __future__ import annotations

import os
import subprocess

from acceptance.backend import BACKEND, Backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    import_verify,
    plan_error,
    plan_text,
    values,
)
from provider.client import NotFound

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

ADDRESS = "gpucloud_budget.nlp"


def budget_config(amount: str, extra: str = "") -> str:
    return f"""
    resource "gpucloud_budget" "nlp" {{
      name         = "nlp monthly"
      amount_usd   = {amount}
      label_filter = {{ key = "team", value = "nlp" }}
      {extra}
    }}
    """


def test_acc_budget_lifecycle(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(budget_config("1500"))
    code, output = plan_text(tf)
    assert code == 2 and 'action = "notify"' in output and "1 to add" in output, output
    apply_and_check(tf)
    state = values(tf, ADDRESS)
    assert state["id"].startswith("bud_") and sorted(state["thresholds"]) == [50, 80, 100]
    remote = backend.client.request("GET", f"/v1/budgets/{state['id']}").body
    assert (remote["amount_usd"], remote["label_filter"], remote["alerts"]) == (
        "1500.000000",
        {"key": "team", "value": "nlp"},
        [],
    )

    tf.write_main(budget_config("2000.25", 'thresholds = [90, 100]\n      action = "block_new"'))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output, output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["id"] == state["id"]
    remote = backend.client.request("GET", f"/v1/budgets/{state['id']}").body
    assert (remote["amount_usd"], remote["thresholds"], remote["action"]) == (
        "2000.250000",
        [90, 100],
        "block_new",
    )

    import_verify(tf, ADDRESS)

    tf.write_main(budget_config("10.001"))
    assert "amount_usd" in plan_error(tf)

    tf.write_main(budget_config("2000.25", 'thresholds = [90, 100]\n      action = "block_new"'))
    tf.destroy()
    try:
        backend.client.request("GET", f"/v1/budgets/{state['id']}")
    except NotFound:
        return
    raise AssertionError("the budget is still there after destroy")


QUOTA_READ = """
data "gpucloud_quota" "project" {}

output "quota" {
  value = data.gpucloud_quota.project
}
"""
QUOTA_CLUSTER = """
resource "gpucloud_gpu_cluster" "big" {
  name          = "big"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 2
}
"""


def set_quota(backend: Backend, *limits: str) -> None:
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(backend.data_dir)}
    done = subprocess.run([str(BACKEND), "set-quota", "--project", "acceptance", *limits], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_acc_quota_exceeded_fails_the_plan_naming_the_quota(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    set_quota(backend, "--max-gpus", "8", "--max-hourly-usd", "500")
    try:
        tf = gpucloud_tf(QUOTA_READ)
        apply_and_check(tf)
        shown = tf.output_json()["quota"]["value"]
        assert (shown["max_gpus"], shown["gpus_in_use"], shown["max_clusters"], shown["max_hourly_usd"]) == (
            8, 0, None, 500)

        tf.write_main(QUOTA_READ + QUOTA_CLUSTER)
        error = plan_error(tf)
        assert "Quota Exceeded" in error, error
        assert "quota max_gpus is 8 GPUs: 0 in use, and this plan adds 16 (16 in all)" in error
        assert "node_count" in error  # the attribute to lower
    finally:
        set_quota(backend, "--max-gpus", "none", "--max-hourly-usd", "none")
