"""gpucloud_gpu_cluster under faults, against the real backend: an injected create failure taints the
cluster and the next apply replaces it (also when found FAILED on read), a node fault ends the wait at
once, a create interrupted by Ctrl-C keeps the healthy cluster (no taint) and the next apply resumes the
wait, and a backend killed and restarted in the middle of an apply still converges without a duplicate
cluster."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend, kill, restart
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_text, values
from acceptance.harness import Terraform, wait_until

__all__ = ["gpucloud_tf"]

# A bring-up takes about 40 s: the Ctrl-C (sent once the cluster exists) and the 2 s create timeout land
# while it provisions, with a wide margin for a loaded machine. (At speed 10 these tests took 20-25 s
# longer each, for no more safety.)
SLOW_BRING_UP = {"GPUCLOUD_SIMULATION_SPEED": "30"}

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


def test_acc_gpu_cluster_node_fault_during_create_fails_at_once_and_taints(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    # Every node suffers a GPU fault (XID) the moment it comes up: FAILED, phase Degraded. The old wait
    # knew only RollingBack/Failed and polled until the 2 h timeout.
    restart(backend, {"GPUCLOUD_SIMULATION_XID_RATE": "1", "GPUCLOUD_SIMULATION_XID_WINDOW_SECONDS": "0.001"})
    tf = gpucloud_tf(CONFIG.replace('"flaky"', '"faulty"', 2))
    result = tf.apply(check=False)  # the harness's ceiling: the old wait polled for the 2 h timeout
    output = " ".join(result.output.split())
    assert result.returncode == 1 and "Error Creating GPU Cluster" in output, output
    assert "phase Degraded" in output and "node faulty-0: hardware fault: XID" in output, output
    assert "tainted" in tf.run("state", "show", "gpucloud_gpu_cluster.faulty").stdout
    restart(backend)
    tf.destroy()


def named(backend: Backend, name: str) -> list[dict[str, object]]:
    """The backend's clusters called `name`."""
    return [c for c in backend.client.list_clusters() if c["name"] == name]


def start_create_and_interrupt(tf: Terraform, backend: Backend, name: str) -> str:
    """Start an apply, press Ctrl-C while the cluster is provisioning; the apply's output."""
    running = tf.start("apply", "-auto-approve")
    try:
        wait_until(lambda: bool(named(backend, name)), lambda: running.stdout)
        running.interrupt()
        result = running.wait()
    finally:
        running.kill()
    return " ".join(result.output.split())


def test_acc_gpu_cluster_interrupted_create_is_kept_and_next_apply_resumes(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tf_version: str
) -> None:
    name = "resumed-" + tf_version.replace(".", "-")
    address = "gpucloud_gpu_cluster.flaky"
    restart(backend, SLOW_BRING_UP)
    tf = gpucloud_tf(CONFIG.replace('name          = "flaky"', f'name          = "{name}"'), tf_version)
    output = start_create_and_interrupt(tf, backend, name)
    assert "GPU Cluster Still Converging" in output and "interrupted" in output, output
    assert "Error Creating GPU Cluster" not in output, output
    restart(backend, {"GPUCLOUD_EMBEDDED_WORKER": "false"})  # the engine holds still meanwhile
    saved = values(tf, address)
    assert saved["status"] in ("PENDING", "PROVISIONING", "CONFIGURING"), saved
    assert "tainted" not in tf.run("state", "show", address).stdout

    # The next plan resumes the wait in place: no replacement, 20 minutes of provisioning kept.
    plan_output = " ".join(tf.plan("-out=resume.tfplan").output.split())
    assert "0 to add, 1 to change, 0 to destroy" in plan_output, plan_output
    assert re.search(r'~ status = "[A-Z_]+" -> \(known after apply\)', plan_output), plan_output
    assert "must be replaced" not in plan_output

    restart(backend, {"GPUCLOUD_SIMULATION_SPEED": "100"})  # the engine runs again; the apply waits
    result = tf.apply(plan_file="resume.tfplan")
    assert "Resources: 0 added, 1 changed, 0 destroyed" in result.output, result.output
    resumed = values(tf, address)
    assert resumed["id"] == saved["id"] and resumed["status"] == "RUNNING"
    assert len([c for c in backend.client.list_clusters() if c["name"] == name]) == 1
    tf.assert_plan_empty()
    tf.destroy()


def test_acc_gpu_cluster_create_timeout_keeps_the_cluster_and_next_apply_finishes(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    restart(backend, SLOW_BRING_UP)
    tf = gpucloud_tf("""
    resource "gpucloud_gpu_cluster" "patient" {
      name          = "patient"
      region        = "us-east-1"
      instance_type = "1xH100"
      timeouts {
        create = "2s"
      }
    }
    """)
    result = tf.apply()  # a warning, not an error: the cluster is healthy, only the wait stopped
    output = " ".join(result.output.split())
    assert "GPU Cluster Still Converging" in output and "timed out" in output, output
    address = "gpucloud_gpu_cluster.patient"
    saved = values(tf, address)
    assert saved["status"] != "RUNNING" and "tainted" not in tf.run("state", "show", address).stdout

    restart(backend)
    tf.apply()  # resumes the wait (an in-place update) or finds it RUNNING already: never a replacement
    finished = values(tf, address)
    assert finished["id"] == saved["id"] and finished["status"] == "RUNNING"
    tf.assert_plan_empty()
    tf.destroy()


def test_acc_gpu_cluster_backend_killed_mid_apply_converges_without_duplicate(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    restart(backend, {"GPUCLOUD_SIMULATION_SPEED": "100"})  # slow enough to kill it mid-provisioning
    tf = gpucloud_tf(CONFIG.replace('"flaky"', '"sturdy"', 2))
    running = tf.start("apply", "-auto-approve")
    try:
        wait_until(lambda: bool(named(backend, "sturdy")), lambda: running.stdout)
        kill(backend)
        time.sleep(3)  # the provider keeps polling a dead API (it retries until the create timeout, 2 h)
        restart(backend)
        result = running.wait(check=True)
    finally:
        running.kill()
    assert "Apply complete! Resources: 1 added" in result.output
    clusters = [c for c in backend.client.list_clusters() if c["name"] == "sturdy"]
    assert len(clusters) == 1 and clusters[0]["status"] == "RUNNING"
    assert values(tf, "gpucloud_gpu_cluster.sturdy")["id"] == clusters[0]["id"]
    tf.assert_plan_empty()
    tf.destroy()
