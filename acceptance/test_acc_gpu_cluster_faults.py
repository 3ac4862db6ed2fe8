"""gpucloud_gpu_cluster under faults, against the real backend: an injected create failure taints the
cluster and the next apply replaces it (also when found FAILED on read), and a backend killed and
restarted in the middle of an apply still converges without a duplicate cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend, kill, restart
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_text, values

__all__ = ["gpucloud_tf"]

ADDRESS = "gpucloud_gpu_cluster.flaky"
CONFIG = """
resource "gpucloud_gpu_cluster" "flaky" {
  name          = "flaky"
  region        = "us-east-1"
  instance_type = "1xH100"
}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def test_acc_gpu_cluster_injected_failure_taints_and_next_apply_replaces(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    restart(backend, {"GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "1"})  # every node boot fails
    tf = gpucloud_tf(CONFIG)
    result = tf.apply(check=False)
    output = " ".join(result.output.split())
    assert result.returncode == 1 and "Error Creating GPU Cluster" in output, output
    assert "tainted" in output
    failed = values(tf, ADDRESS)
    assert failed["status"] == "FAILED"
    assert "tainted" in tf.run("state", "show", ADDRESS).stdout

    # Found FAILED on read (not tainted): the provider plans the replacement and says why.
    tf.run("untaint", ADDRESS)
    code, output = plan_text(tf)
    assert code == 2 and "Failed Cluster Will Be Replaced" in output
    assert "1 to add, 0 to change, 1 to destroy" in output

    restart(backend)  # faults off
    apply_and_check(tf)
    replaced = values(tf, ADDRESS)
    assert replaced["id"] != failed["id"] and replaced["status"] == "RUNNING"
    assert [c["id"] for c in backend.client.list_clusters() if c["name"] == "flaky"] == [replaced["id"]]
    tf.destroy()


def test_acc_gpu_cluster_backend_killed_mid_apply_converges_without_duplicate(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    restart(backend, {"GPUCLOUD_SIMULATION_SPEED": "100"})  # slow enough to kill it mid-provisioning
    tf = gpucloud_tf(CONFIG.replace('"flaky"', '"sturdy"', 2))
    running = tf.start("apply", "-auto-approve")
    deadline = time.monotonic() + 60
    while not [c for c in backend.client.list_clusters() if c["name"] == "sturdy"]:
        assert time.monotonic() < deadline, running.stdout
        time.sleep(0.2)
    kill(backend)
    time.sleep(3)  # the provider keeps polling a dead API
    restart(backend)
    result = running.wait(timeout=180, check=True)
    assert "Apply complete! Resources: 1 added" in result.output
    clusters = [c for c in backend.client.list_clusters() if c["name"] == "sturdy"]
    assert len(clusters) == 1 and clusters[0]["status"] == "RUNNING"
    assert values(tf, "gpucloud_gpu_cluster.sturdy")["id"] == clusters[0]["id"]
    tf.assert_plan_empty()
    tf.destroy()
