"""Every example names the provider `gpucloud/gpucloud` (docs/installing.md: a CLI configuration points
Terraform at the backend's network mirror), and the example roots that read an existing cluster run
for real against the backend:

- examples/terraform/kubernetes: the values main.tf hands to the kubernetes and helm providers (endpoint,
  CA certificate, the token of the ephemeral admin kubeconfig) are the cluster's, and nothing lands on
  disk or in the state. The two providers themselves cannot be installed here (no registry access):
  kubernetes.tf is only checked by `terraform fmt`, and a probe stands in for the provider blocks.
- examples/terraform/ssh-proxyjump: its outputs reach every node through the jumphost, checked by
  OpenSSH's own parser (`ssh -G`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.harness import Terraform, TerraformFactory
from acceptance.workflow_steps import EXAMPLES, eventually, member_api_key

TERRAFORM_EXAMPLES = EXAMPLES / "terraform"

# Stands in for the kubernetes and helm provider blocks: receives the same values through a provisioner's
# environment (an ephemeral context too) and writes them where the test can compare them.
PROBE = """
resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command     = <<-EOT
      printf '%s' "$host" > probe-host
      printf '%s' "$cluster_ca_certificate" > probe-ca
      printf '%s' "$token" > probe-token
    EOT
    environment = local.kubernetes
  }
}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def _running_cluster(backend: Backend, **spec: Any) -> dict[str, Any]:
    cluster = backend.client.create_cluster({"region": "us-east-1", **spec}, idempotency_key=spec["name"])
    assert eventually(lambda: backend.client.get_cluster(cluster["id"])["status"] == "RUNNING")
    return backend.client.get_cluster(cluster["id"])


def _example_root(terraform: TerraformFactory, backend: Backend, name: str, *files: str) -> Terraform:
    tf = terraform("1.11")
    tf.env.update(backend.provider_env)
    for file in files:
        shutil.copy(TERRAFORM_EXAMPLES / name / file, tf.workdir / file)
    return tf


def test_acc_examples_name_the_provider_as_teams_install_it() -> None:
    # A registry host in a source address would tie a shared module to one backend, and a lock file
    # written for one address does not verify the other: one address everywhere.
    sources = {
        path.relative_to(EXAMPLES).as_posix(): re.findall(r'gpucloud\s*=\s*{[^}]*source\s*=\s*"([^"]+)"',
                                                          path.read_text())
        for path in EXAMPLES.rglob("*.tf")
    }
    naming = {path: found for path, found in sources.items() if found}
    assert "terraform/modules/gpu-training-cluster/versions.tf" in naming
    assert {path: found for path, found in naming.items() if found != ["gpucloud/gpucloud"]} == {}


def test_acc_examples_are_formatted(terraform: TerraformFactory) -> None:
    # The one check kubernetes.tf gets here: it parses and is in canonical form.
    tf = terraform("1.11", mirror=False)
    result = tf.run("fmt", "-check", "-recursive", "-diff", str(TERRAFORM_EXAMPLES), check=False)
    assert result.returncode == 0, result.output


def test_acc_examples_kubernetes_providers_get_the_ephemeral_credentials(
    terraform: TerraformFactory, backend: Backend
) -> None:
    # The example's default cluster name: a single-node Kubernetes cluster made outside this root.
    cluster = _running_cluster(backend, name="vision-detector", instance_type="1xH100",
                               orchestrator="kubernetes")
    tf = _example_root(terraform, backend, "kubernetes", "main.tf")
    tf.write("probe.tf", PROBE)
    tf.init()
    tf.apply()

    kubeconfig = backend.client.get_cluster_credentials(cluster["id"])["kubeconfig"]
    token = next(line.split(":", 1)[1].strip().strip('"') for line in kubeconfig.splitlines()
                 if line.strip().startswith("token:"))
    assert len(token) >= 32 and "BEGIN CERTIFICATE" in cluster["kubernetes"]["ca_certificate"]
    assert (tf.workdir / "probe-host").read_text() == cluster["kubernetes"]["api_endpoint"]
    assert (tf.workdir / "probe-ca").read_text() == cluster["kubernetes"]["ca_certificate"]
    assert (tf.workdir / "probe-token").read_text() == token
    assert token not in (tf.workdir / "terraform.tfstate").read_text()
    assert not [p.name for p in tf.workdir.iterdir() if "kubeconfig" in p.name or p.suffix == ".yaml"]

    # The credentials are opened at plan time too: a read-only (member) key cannot even plan this root.
    result = tf.run("plan", check=False, env={"GPUCLOUD_API_KEY": member_api_key(backend)})
    text = " ".join(result.output.split())
    assert result.returncode == 1 and "member role, which is read-only" in text, result.output

    # A cluster without Kubernetes is refused at plan time, naming the variable to change.
    backend.client.create_cluster({"name": "notebook", "region": "us-east-1", "instance_type": "1xH100"},
                                  idempotency_key="notebook")
    result = tf.plan("-var", "cluster_name=notebook", check=False)
    text = " ".join(result.output.split())
    assert result.returncode == 1 and "Cluster notebook runs none, not kubernetes" in text, result.output


def test_acc_examples_ssh_proxyjump_reaches_every_node_through_the_jumphost(
    terraform: TerraformFactory, backend: Backend, tmp_path: Path
) -> None:
    cluster = _running_cluster(backend, name="jumpy", instance_type="8xH100", node_count=2)
    tf = _example_root(terraform, backend, "ssh-proxyjump", "main.tf")
    tf.init()
    tf.apply("-var", "cluster_name=jumpy")
    outputs = {name: output["value"] for name, output in tf.output_json().items()}
    login, nodes = cluster["login"], cluster["nodes"]
    host, user, port = login.get("public_ip") or login["host"], login["user"], int(login.get("port") or 22)
    assert len(nodes) == 2

    config = tmp_path / "ssh_config"
    config.write_text(outputs["ssh_config"])
    for node in nodes:
        resolved = subprocess.run(["ssh", "-G", "-F", str(config), node["name"]], capture_output=True,
                                  text=True, check=True).stdout.splitlines()
        assert f"hostname {node['private_ip']}" in resolved and f"user {user}" in resolved
        assert "proxyjump jumpy-jumphost" in resolved
        command = outputs["node_ssh_commands"][node["name"]]
        assert command == f"ssh -J {user}@{host}:{port} {user}@{node['private_ip']}"
    jump = subprocess.run(["ssh", "-G", "-F", str(config), "jumpy-jumphost"], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert f"hostname {host}" in jump and f"port {port}" in jump and f"user {user}" in jump
    assert not [line for line in jump if line.startswith("proxyjump")]
