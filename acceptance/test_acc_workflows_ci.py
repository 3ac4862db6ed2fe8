"""The CI pipeline example end to end, on Terraform 1.11 and 1.15: `examples/ci/terraform-ci.sh` runs the
NLP team's root (examples/terraform/teams/nlp), from a clean copy of the repository, against the real
backend over HTTPS, installing the provider from the backend's network mirror (no Python environment of
ours: the system's python3 runs the package). The lock file is the team's, written once by the `lock`
mode and committed; then the plan job, the apply job, a clean drift job, a change made out of band
through the API that the drift job reports, and the next plan + apply putting it back. And the roles
docs/guides/ci.md gives each job: plan and drift run on a read-only (member) key, apply needs an admin
key."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from acceptance.cluster_backend import FAST_ENGINE
from acceptance.provider_registry import PLATFORMS, VERSION, Registry, registry_backend, signed_packages
from acceptance.workflow_steps import ScriptResult, cluster_named, copy_examples, member_api_key, run_ci
from backend.services.provider_packages import package_hash_v1
from provider.client import GpuCloudClient
from release.provider_package import package_name


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The backend at a fast simulation speed, over HTTPS, serving the provider's signed packages."""
    packages = signed_packages(tmp_path_factory)
    with registry_backend(tmp_path_factory.mktemp("backend"), packages, env=FAST_ENGINE) as served:
        # The test's own out-of-band client trusts the throwaway CA too.
        trusting = httpx.HTTPTransport(verify=ssl.create_default_context(cafile=served.ca))
        client = GpuCloudClient(served.backend.url, served.backend.api_key, max_retries=2, transport=trusting)
        served.backend.client = client
        try:
            yield served
        finally:
            client.close()


def _ci(mode: str, root: Path, registry: Registry, version: str = "1.11", **extra: str) -> ScriptResult:
    return run_ci(mode, root=root, version=version, env=registry.env, extra_env=extra)


def _locked(root: Path, registry: Registry) -> str:
    """`terraform-ci.sh lock`, as the team runs it once and commits the result."""
    result = _ci("lock", root, registry)
    assert result.returncode == 0, result.output
    return (root / ".terraform.lock.hcl").read_text()


def test_acc_workflows_ci_pipeline_drift_and_reconcile(
    tf_version: str, registry: Registry, tmp_path: Path
) -> None:
    backend = registry.backend
    root = copy_examples(tmp_path) / "teams" / "nlp"
    key = f"ci{tf_version.replace('.', '')}"
    # The shipped root, with its inventory narrowed to one fast single-GPU cluster.
    inventory = {"TF_VAR_clusters": json.dumps({key: {"instance_type": "1xH100", "orchestrator": "none"}})}

    def ci(mode: str) -> tuple[int, str]:
        result = _ci(mode, root, registry, tf_version, **inventory)
        return result.returncode, result.output

    # A clean clone has no lock file: the plan job refuses, saying how to make the one to commit.
    code, output = ci("plan")
    assert code == 1 and "no .terraform.lock.hcl" in output and "terraform-ci.sh lock" in output, output
    assert "terraform plan" not in output

    # The team locks once, for every platform it uses, from the backend's network mirror.
    code, output = ci("lock")
    assert code == 0, output
    assert f"locking registry.terraform.io/gpucloud/gpucloud for {' '.join(PLATFORMS)}" in output
    lock = (root / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/gpucloud/gpucloud"' in lock
    assert f'version     = "{VERSION}"' in lock
    for platform in PLATFORMS:
        assert package_hash_v1(registry.packages / package_name(VERSION, platform)) in lock, platform

    # Plan job: read-only init from the mirror with the committed lock file, then the checks and the plan.
    code, output = ci("plan")
    assert code == 0, output
    assert "using the committed .terraform.lock.hcl" in output
    assert "terraform init -lockfile=readonly" in output
    assert f"Installed gpucloud/gpucloud v{VERSION}" in output, output
    assert "Success! The configuration is valid." in output
    assert "changes present" in output and "Plan: 1 to add, 0 to change, 0 to destroy." in output, output
    assert (root / "gpucloud.tfplan").is_file()
    assert (root / ".terraform.lock.hcl").read_text() == lock  # CI never rewrites it

    # Apply job: the saved plan, nothing else.
    code, output = ci("apply")
    assert code == 0 and "Apply complete! Resources: 1 added" in output, output
    cluster = cluster_named(backend, f"nlp-{key}")
    assert cluster is not None and cluster["status"] == "RUNNING"
    assert cluster["labels"] == {"team": "nlp", "managed-by": "terraform", "module": "gpu-training-cluster",
                                 "cost-center": "research-nlp"}

    # Scheduled drift job, nothing changed: exit 0. Terraform may itself exit 2 here (the refresh stored
    # provider-private data, or Terraform < 1.15 compared decoded numbers: hashicorp/terraform#36403);
    # the script then reads the plan, finds no drift and exits 0.
    code, output = ci("drift")
    assert code == 0 and "no drift" in output.lower(), output

    # Someone relabels the cluster through the API: the drift job exits 2 and says what changed.
    backend.client.update_cluster(cluster["id"], {"labels": {**cluster["labels"], "owner": "ops",
                                                             "cost-center": "unknown"}})
    code, output = ci("drift")
    assert code == 2, output
    address = f'module.cluster["{key}"].gpucloud_gpu_cluster.this'
    assert f"~ {address}: changed outside Terraform" in output, output
    assert 'labels.owner: (absent) -> "ops"' in output, output
    assert 'labels.cost-center: "research-nlp" -> "unknown"' in output, output

    # The next plan + apply put the configuration back.
    code, output = ci("plan")
    assert code == 0 and "changes present" in output and "1 to change" in output, output
    code, output = ci("apply")
    assert code == 0 and "Apply complete! Resources: 0 added, 1 changed, 0 destroyed." in output, output
    assert backend.client.get_cluster(cluster["id"])["labels"] == cluster["labels"]
    code, output = ci("drift")
    assert code == 0, output

    # With nothing to do the plan job says so; and -lockfile=readonly refuses provider bytes that do not
    # match the committed lock file.
    code, output = ci("plan")
    assert code == 0 and "no changes" in output, output
    # Every hash of every platform altered: no recorded checksum matches what the mirror serves.
    (root / ".terraform.lock.hcl").write_text(re.sub(r'"(h1|zh):', r'"\1:AAAA', lock))
    code, output = ci("apply")
    mismatch = "doesn't match any of the checksums previously recorded in the dependency lock file"
    assert code == 1 and mismatch in " ".join(output.split()), output


def test_acc_workflows_ci_rejects_unformatted_code(registry: Registry, tmp_path: Path) -> None:
    root = copy_examples(tmp_path) / "teams" / "vision"
    main = root / "main.tf"
    main.write_text(main.read_text().replace('  team = "vision"', '  team="vision"'))
    _locked(root, registry)
    result = _ci("plan", root, registry)
    assert result.returncode == 1, result.output
    assert "main.tf" in result.output and "files are not formatted" in result.output
    assert "terraform plan" not in result.output  # stopped before planning


def test_acc_workflows_ci_mirror_must_be_https(registry: Registry, tmp_path: Path) -> None:
    root = copy_examples(tmp_path) / "teams" / "nlp"
    plain = registry.backend.url.replace("https://", "http://")
    result = _ci("lock", root, registry, GPUCLOUD_ENDPOINT=plain)
    assert result.returncode == 1
    assert f"the provider mirror {plain}/v1/mirror/ must be https://" in result.output, result.output
    assert not (root / ".terraform.lock.hcl").exists()


def test_acc_workflows_ci_member_key_plans_and_checks_drift_admin_key_applies(
    registry: Registry, tmp_path: Path
) -> None:
    backend = registry.backend
    root = copy_examples(tmp_path) / "teams" / "nlp"
    member = {"GPUCLOUD_API_KEY": member_api_key(backend)}
    admin = {"GPUCLOUD_API_KEY": backend.api_key}
    _locked(root, registry)

    def ci(mode: str, key: dict[str, str], volume_tib: int = 0) -> tuple[int, str]:
        cluster = {"instance_type": "1xH100", "orchestrator": "none", "volume_size_tib": volume_tib}
        inventory = {"roles": cluster}
        result = _ci(mode, root, registry, **key, TF_VAR_clusters=json.dumps(inventory))
        return result.returncode, result.output

    # The plan job reads only (catalog, price estimate, refresh): a member key is enough.
    code, output = ci("plan", member)
    assert code == 0 and "Plan: 1 to add" in output, output
    # The apply job writes: with the admin key it applies the plan the member key made.
    code, output = ci("apply", admin)
    assert code == 0 and "Apply complete! Resources: 1 added" in output, output
    # The drift job is a refresh-only plan: a member key is enough.
    code, output = ci("drift", member)
    assert code == 0 and "no drift" in output.lower(), output

    # A member key in the apply job fails at the first write, saying which role it needs.
    code, output = ci("plan", member, volume_tib=1)
    assert code == 0 and "Plan: 1 to add, 1 to change" in output, output
    code, output = ci("apply", member)
    text = " ".join(output.split())
    assert code == 1 and "member role, which is read-only" in text, output
    assert "use an admin key" in text and "member or admin" not in text, output
    assert backend.client.list_volumes(name="nlp-roles-data") == []
