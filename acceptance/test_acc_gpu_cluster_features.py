"""gpucloud_gpu_cluster features against the real backend: Kubernetes on EFA with credentials that never
reach the state, the cluster data source, reserved billing, and invalid configurations that fail at plan
time naming the attribute (capacity included)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import (
    PROVIDER_BLOCK,
    GpuCloudTerraform,
    apply_and_check,
    expiry_after,
    gpucloud_tf,
    plan_text,
    values,
)
from acceptance.harness import TerraformFactory, wait_until
from provider.client import NotFound

__all__ = ["gpucloud_tf"]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


KUBERNETES_EFA = """
resource "gpucloud_gpu_cluster" "k8s" {
  name          = "k8s"
  region        = "us-east-1"
  instance_type = "8xH100-EFA"
  node_count    = 2
  orchestrator  = "kubernetes"
}

data "gpucloud_gpu_cluster" "k8s" {
  name = gpucloud_gpu_cluster.k8s.name
}

ephemeral "gpucloud_cluster_credentials" "admin" {
  cluster_id = gpucloud_gpu_cluster.k8s.id
}

resource "terraform_data" "kubeconfig" {
  triggers_replace = [gpucloud_gpu_cluster.k8s.id]
  provisioner "local-exec" {
    command     = "printf '%s' \\"$KUBECONFIG_TEXT\\" > kubeconfig.yaml"
    environment = { KUBECONFIG_TEXT = ephemeral.gpucloud_cluster_credentials.admin.kubeconfig }
  }
}

output "api_endpoint" {
  value = data.gpucloud_gpu_cluster.k8s.kubernetes.api_endpoint
}
"""


def test_acc_gpu_cluster_kubernetes_on_efa_with_ephemeral_credentials(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(KUBERNETES_EFA)
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.k8s")
    assert (state["interconnect"], state["orchestrator"], state["num_gpus"]) == ("efa", "kubernetes", 16)
    assert state["nodes"][0]["efa_interfaces"] and not state["nodes"][0]["hcas"]
    assert state["nccl_env"]["FI_PROVIDER"] == "efa"
    endpoint = state["kubernetes"]["api_endpoint"]
    assert endpoint.startswith("https://") and "BEGIN CERTIFICATE" in state["kubernetes"]["ca_certificate"]
    assert tf.output_json()["api_endpoint"]["value"] == endpoint

    kubeconfig = (tf.workdir / "kubeconfig.yaml").read_text()
    assert "kind: Config" in kubeconfig or "apiVersion" in kubeconfig
    token = re.search(r"token:\s*(\S+)", kubeconfig)
    state_file = (tf.workdir / "terraform.tfstate").read_text()
    assert token is not None and token.group(1) not in state_file  # the credentials never reach state

    tf.destroy()


RESERVED = """
resource "gpucloud_gpu_cluster" "reserved" {
  name          = "reserved"
  region        = "us-east-1"
  instance_type = "8xH100"
  billing = {
    type          = "reserved"
    duration_days = 7
    on_expiry     = "%s"
  }
}
"""


def test_acc_gpu_cluster_reserved_billing(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(RESERVED % "decommission")
    code, output = plan_text(tf)
    # 7-day terms get 15 % off: 8 GPUs x 3.99 x 0.85.
    assert code == 2 and "estimated_hourly_cost_usd = 27.132" in output, output
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.reserved")
    assert state["billing"] == {"type": "reserved", "duration_days": 7, "on_expiry": "decommission"}
    # The whole term up front: 27.132 USD/h x 24 h x 7 days.
    assert float(state["reservation"]["upfront_cost_usd"]) == pytest.approx(4558.176)
    assert backend.client.get_cluster(state["id"])["billing"]["type"] == "reserved"

    tf.write_main(RESERVED % "convert_to_on_demand")
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output
    apply_and_check(tf)
    remote = backend.client.get_cluster(state["id"])
    assert remote["billing"]["on_expiry"] == "convert_to_on_demand"

    tf.write_main((RESERVED % "convert_to_on_demand").replace("duration_days = 7", "duration_days = 30"))
    code, output = plan_text(tf)
    assert code == 2 and "forces replacement" in output

    tf.write_main(RESERVED % "convert_to_on_demand")
    tf.destroy()


def cluster(name: str, body: str) -> str:
    return f"""
    resource "gpucloud_gpu_cluster" "{name}" {{
      name          = "{name.replace('_', '-')}"
      region        = "us-east-1"
      instance_type = "8xH100"
      {body}
    }}
    """


# (resource name, body, expected summary, attribute named in the diagnostic)
STATIC_INVALID = [
    ("zero_nodes", "node_count = 0", "Invalid Attribute Value", "node_count"),
    ("bad_orchestrator", 'orchestrator = "nomad"', "Invalid Attribute Value Match", "orchestrator"),
    ("bare_multi", 'node_count = 2\norchestrator = "none"', "Orchestrator Required", "orchestrator"),
    ("container_multi", 'node_count = 2\ncontainer = "pytorch"', "Container Needs A Single Node",
     "container"),
    ("reserved_no_days", 'billing = {\n  type = "reserved"\n}', "Missing Reserved Term", "billing"),
    ("long_term", 'billing = {\n  type = "reserved"\n  duration_days = 120\n}', "Invalid Attribute Value",
     "duration_days"),
    ("bad_label", 'labels = { "Bad Key" = "x" }', "Invalid Attribute Value Match", "labels"),
    # Rules the API enforced at apply only: now derived from its contract, so plan fails first.
    ("cent_fractions", "max_hourly_cost_usd = 12.3456789", "Invalid Attribute Value",
     "max_hourly_cost_usd"),
    ("days_on_demand", "billing = {\n  duration_days = 7\n}", "Reserved Term Without Reserved Billing",
     "billing"),
]
PLAN_INVALID = [
    ("bad_region", 'region = "mars-1"', "Unknown Region", "region"),
    ("bad_type", 'instance_type = "9xZ9"', "Unknown Instance Type", "instance_type"),
    ("not_fabric", 'instance_type = "1xH100"\nnode_count = 2', "Instance Type Cannot Form A Cluster",
     "node_count"),
    ("wrong_fabric", 'interconnect = "efa"', "Unsupported Interconnect", "interconnect"),
    ("not_here", 'instance_type = "8xB200"', "Instance Type Not Offered In Region", "instance_type"),
    ("too_dear", "max_hourly_cost_usd = 10", "Hourly Cost Above Limit", "max_hourly_cost_usd"),
    ("no_capacity", "node_count = 300", "Insufficient Capacity", "node_count"),
]


def _with_overrides(name: str, body: str) -> str:
    """A cluster whose body may override region/instance_type (later HCL lines may not repeat them)."""
    text = cluster(name, "")
    for line in body.splitlines():
        key = line.split("=")[0].strip()
        if key in ("region", "instance_type"):
            text = re.sub(rf"\n\s*{key}\s*=.*", "", text)
    return text.replace("\n    }", "\n" + body + "\n}", 1)


def diagnostics(output: str) -> list[str]:
    return output.split("Error: ")[1:]


def assert_reported(output: str, name: str, summary: str, attribute: str) -> None:
    blocks = [b for b in diagnostics(output) if f"with gpucloud_gpu_cluster.{name}," in b]
    assert blocks, f"no diagnostic for {name}:\n{output}"
    assert any(b.startswith(summary) and attribute in b for b in blocks), (name, blocks)


def test_acc_gpu_cluster_invalid_configurations_fail_at_plan(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    static = STATIC_INVALID
    config = "\n".join(_with_overrides(n, b) for n, b, _, _ in static)
    config += cluster("bad_name", "").replace('name          = "bad-name"', 'name          = "Bad_Name"')
    tf = gpucloud_tf(config)
    result = tf.plan(check=False)
    assert result.returncode == 1
    for name, _, summary, attribute in static:
        assert_reported(result.output, name, summary, attribute)
    assert_reported(result.output, "bad_name", "Invalid Cluster Name", "name")

    tf.write_main("\n".join(_with_overrides(n, b) for n, b, _, _ in PLAN_INVALID))
    result = tf.plan(check=False)
    assert result.returncode == 1
    for name, _, summary, attribute in PLAN_INVALID:
        assert_reported(result.output, name, summary, attribute)
    assert "at most 256 are available" in " ".join(result.output.split())
    assert backend.client.list_clusters() == []


def test_acc_gpu_cluster_on_terraform_115_refresh_finds_nothing_new(
    terraform: TerraformFactory, backend: Backend
) -> None:
    tf = terraform("1.15")
    tf.env.update(backend.provider_env)
    tf.write("provider.tf", PROVIDER_BLOCK)
    tf.write_main(cluster("latest", "").replace('"8xH100"', '"1xH100"'))
    tf.init()
    apply_and_check(tf)
    # Terraform 1.15 counts provider-private changes in refresh-only plans: the ETag kept by apply
    # is the one the refresh reads, so there is nothing to report.
    assert plan_text(tf, "-refresh-only")[0] == 0
    tf.destroy()


LIFETIME = """
resource "gpucloud_gpu_cluster" "short" {
  name          = "short"
  region        = "us-east-1"
  instance_type = "1xH100"
  %s
}
"""


def test_acc_gpu_cluster_ttl_plan_shows_expires_at_and_expiry_plans_a_create(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(LIFETIME % 'ttl = "8h"')
    code, output = plan_text(tf)
    assert code == 2 and "+ expires_at = (known after apply)" in output, output
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.short")
    created = dt.datetime.fromisoformat(state["created_at"].replace("Z", "+00:00"))
    expires_at = (created + dt.timedelta(hours=8)).replace(microsecond=0)
    assert state["expires_at"] == expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")

    # A fixed time soon: the plan shows the change, the engine deletes the cluster then, and the next
    # plan creates it again, as for any cluster deleted outside Terraform.
    soon = expiry_after(tf, commands=4)  # the plan below, the apply and its two follow-up plans
    tf.write_main(LIFETIME % f'expires_at = "{soon}"')
    code, output = plan_text(tf)
    assert code == 2 and f'~ expires_at = "{state["expires_at"]}" -> "{soon}"' in output, output
    assert '- ttl = "8h" -> null' in output, output
    apply_and_check(tf)
    wait_until(lambda: not _still_there(backend, state["id"]),
               lambda: f"{state['id']} not deleted at its expiry {soon}", interval=1)
    code, output = plan_text(tf)
    assert code == 2 and "1 to add, 0 to change, 0 to destroy" in output, output
    assert f'+ expires_at = "{soon}"' in output, output


def _still_there(backend: Backend, cluster_id: str) -> bool:
    try:
        return backend.client.get_cluster(cluster_id).get("deletion_requested_at") is None
    except NotFound:
        return False
