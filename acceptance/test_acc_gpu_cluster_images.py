"""gpucloud_gpu_cluster container images against the real backend (simulated datacenter and its modelled
registry, `backend/provisioning/drivers/simulated/registry.py`): a create that waits for the imports, an
in-place update (never a replacement), a private registry whose password never leaves the state, an
update that fails naming the image with the old image kept and the change proposed again, a create whose
image is missing failing with the reason, and a reference typo refused at plan time on its map key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    gpucloud_tf,
    new_public_key,
    plan_error,
    plan_text,
    values,
)
from acceptance.harness import Terraform, TerraformFactory
from acceptance.workflow_steps import EXAMPLES

__all__ = ["gpucloud_tf"]

PASSWORD = "s3cret-for-the-registry"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def cluster(images: str, credentials: str = "", name: str = "imgs") -> str:
    return f"""
variable "registry_password" {{
  type      = string
  sensitive = true
  default   = "{PASSWORD}"
}}

resource "gpucloud_gpu_cluster" "c" {{
  name             = "{name}"
  region           = "us-east-1"
  instance_type    = "8xH100"
  node_count       = 2
  container_images = {{ {images} }}
  {credentials}
}}

output "images" {{
  value = gpucloud_gpu_cluster.c.images
}}
"""


LOGIN = """registry_credentials = {
    "registry.internal:5000" = { username = "ci", password = var.registry_password }
  }"""


def image_states(tf: Terraform) -> dict[str, tuple[str, str | None, str | None]]:
    state = values(tf, "gpucloud_gpu_cluster.c")
    return {i["name"]: (i["state"], i["digest"], i["reason"]) for i in state["images"]}


def test_acc_gpu_cluster_images_create_update_private_and_failures(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(cluster('train = "registry.internal:5000/private/train:v3"', LOGIN))
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.c")
    assert state["status"] == "RUNNING" and state["phase"] == "Ready"
    (train,) = state["images"]
    assert (train["name"], train["state"], train["reason"]) == ("train", "ready", None)
    assert train["digest"].startswith("sha256:") and train["size_bytes"] > 0
    assert state["image_storage_bytes"] == train["size_bytes"]
    remote = backend.client.get_cluster(state["id"])
    assert remote["registry_credentials"] == {"registry.internal:5000": {"username": "ci"}}
    assert PASSWORD not in str(remote)
    assert state["registry_credentials"]["registry.internal:5000"]["password"] == PASSWORD  # kept from config

    # An added image and a changed one: in place, the nodes kept, imported before the apply returns.
    tf.write_main(cluster('train = "registry.internal:5000/private/train:v4", base = "ubuntu:22.04"', LOGIN))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output and "forces replacement" not in output, output
    apply_and_check(tf)
    after = values(tf, "gpucloud_gpu_cluster.c")
    assert after["id"] == state["id"] and after["nodes"] == state["nodes"]
    found = image_states(tf)
    assert found["base"][0] == "ready" and found["train"][0] == "ready"
    assert found["train"][1] != train["digest"]

    # A tag that does not exist: the apply fails on container_images["train"] with the registry's reason,
    # /images/train keeps v4, and the next plan proposes the change again.
    tf.write_main(cluster('train = "registry.internal:5000/private/train:missing-v5", base = "ubuntu:22.04"',
                          LOGIN))
    failed = tf.apply(check=False)
    text = " ".join(failed.output.split())
    assert failed.returncode == 1 and "Container Image Import Failed" in text, text
    assert 'container_images["train"]' in text and "keeps the previous image" in text
    kept = values(tf, "gpucloud_gpu_cluster.c")
    assert kept["container_images"]["train"] == "registry.internal:5000/private/train:v4"
    assert image_states(tf)["train"][:2] == ("failed", found["train"][1])  # the old bundle stays
    code, output = plan_text(tf)
    assert code == 2 and "missing-v5" in output and "1 to change" in output

    # A wrong password: refused by the registry, named as such.
    tf.write_main(cluster('train = "registry.internal:5000/private/train:v6", base = "ubuntu:22.04"',
                          LOGIN.replace("var.registry_password", '"wrong-password"')))
    failed = tf.apply(check=False)
    text = " ".join(failed.output.split())
    assert failed.returncode == 1 and 'container_images["train"]' in text, text
    assert "refused the credentials" in text

    # Back to a working configuration: a clean apply, an empty plan, and import by id reads it back.
    tf.write_main(cluster('train = "registry.internal:5000/private/train:v4"', LOGIN))
    apply_and_check(tf)
    assert set(image_states(tf)) == {"train"}
    import_verify_without_password(tf)
    tf.destroy()


def import_verify_without_password(tf: Terraform) -> None:
    """Import reads the logins' users; the password (write-only) comes back null and is planned again."""
    applied = values(tf, "gpucloud_gpu_cluster.c")
    tf.run("state", "rm", "gpucloud_gpu_cluster.c")
    tf.import_("gpucloud_gpu_cluster.c", applied["id"])
    imported = values(tf, "gpucloud_gpu_cluster.c")
    login = imported["registry_credentials"]["registry.internal:5000"]
    assert login == {"username": "ci", "password": None}
    assert imported["images"] == applied["images"]
    apply_and_check(tf)  # writes the configured password back (the API replaces the logins)


def test_acc_gpu_cluster_create_with_a_missing_image_fails_naming_it(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(cluster('app = "ghcr.io/org/missing:1"', name="missing"))
    failed = tf.apply(check=False)
    text = " ".join(failed.output.split())
    assert failed.returncode == 1 and "did not become RUNNING" in text, text
    assert 'container_images["app"]' in text and "ghcr.io/org/missing:1" in text
    tf.destroy()


def test_acc_gpu_cluster_image_typos_fail_at_plan_on_the_key(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(cluster('Train = "ubuntu:22.04", ok = "ghcr.io/Org/img:1"', name="typos"))
    text = plan_error(tf)
    assert 'container_images["Train"]' in text and "is not an image name" in text
    assert 'write "ghcr.io/org/img:1"' in text



def test_acc_gpu_cluster_images_example_applies(terraform: TerraformFactory, backend: Backend) -> None:
    """`examples/terraform/containers` as written: both images imported, the run line printed."""
    tf = terraform("1.11")
    tf.env.update({**backend.provider_env, "TF_VAR_registry_password": PASSWORD})
    tf.write_main((EXAMPLES / "terraform" / "containers" / "main.tf").read_text())
    tf.init()
    apply_and_check(tf)
    outputs = tf.output_json()
    assert set(outputs["images"]["value"]) == {"torch", "train"}
    assert all(v.startswith("ready sha256:") for v in outputs["images"]["value"].values())
    assert "srun -N2 --container=/images/train" in outputs["run"]["value"]
    tf.destroy()


def gpucloud(backend: Backend, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`gpucloud ARGS` as a user runs it, with the backend's credentials and `env` only."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    environment.update(PYTHONPATH=str(REPO), HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
                       **backend.provider_env, **env)
    return subprocess.run([sys.executable, "-m", "provider.cli.main", *args], env=environment, text=True,
                          capture_output=True, timeout=300, check=False, stdin=subprocess.DEVNULL)


def test_acc_gpu_cluster_images_from_the_cli(backend: Backend, tmp_path: Path) -> None:
    """Create with --image and --registry-login (password from the environment), list, change with a
    failure named, remove; the password is never on the command line nor in any answer."""
    key = tmp_path / "id.pub"
    key.write_text(new_public_key("images@cli") + "\n")
    private = "registry.internal:5000/private/train:v1"
    password = {"GPUCLOUD_REGISTRY_PASSWORD_REGISTRY_INTERNAL_5000": PASSWORD}
    created = gpucloud(backend, tmp_path, "cluster", "create", "8xH100", "-n", "2", "--name", "cliimg",
                       "--region", "us-east-1", "-i", str(key), "--image", f"train={private}",
                       "--image", "base=ubuntu:22.04", "--registry-login", "registry.internal:5000=ci",
                       "--json", **password)
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert {i["name"]: i["state"] for i in body["images"]} == {"base": "ready", "train": "ready"}
    assert PASSWORD not in created.stdout + created.stderr

    listed = gpucloud(backend, tmp_path, "cluster", "images", "cliimg")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[:2] for line in listed.stdout.splitlines()[1:]]
    assert rows == [["base", "READY"], ["train", "READY"]]

    failed = gpucloud(backend, tmp_path, "cluster", "image", "set", "cliimg",
                      "train=registry.internal:5000/private/train:missing-9")
    assert failed.returncode == 1
    assert "train (registry.internal:5000/private/train:missing-9)" in failed.stderr
    assert "has no such repository or tag" in failed.stderr and "stays in place" in failed.stderr

    removed = gpucloud(backend, tmp_path, "cluster", "image", "remove", "cliimg", "base")
    assert removed.returncode == 0, removed.stderr
    info = gpucloud(backend, tmp_path, "cluster", "info", "cliimg")
    missing = "registry.internal:5000/private/train:missing-9"
    assert f"/images/train: {missing} failed (still sha256:" in info.stdout, info.stdout
    assert "/images/base" not in info.stdout and "ci@registry.internal:5000" in info.stdout
    deleted = gpucloud(backend, tmp_path, "cluster", "delete", "cliimg", "--yes")
    assert deleted.returncode == 0, deleted.stderr
