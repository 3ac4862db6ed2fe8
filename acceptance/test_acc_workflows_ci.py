"""The CI pipeline example end to end, on Terraform 1.11 and 1.15: `examples/ci/terraform-ci.sh` runs the
NLP team's root (examples/terraform/teams/nlp) from the provider mirror against the real backend:
plan job, apply job, a clean drift job, a change made out of band through the API that the drift job
reports, and the next plan + apply putting it back. And the roles docs/guides/ci.md gives each job: plan
and drift run on a read-only (member) key, apply needs an admin key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.workflow_steps import cluster_named, copy_examples, member_api_key, run_ci


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def test_acc_workflows_ci_pipeline_drift_and_reconcile(
    tf_version: str, backend: Backend, provider_mirror: Path, tmp_path: Path
) -> None:
    root = copy_examples(tmp_path) / "teams" / "nlp"
    key = f"ci{tf_version.replace('.', '')}"
    # The shipped root, with its inventory narrowed to one fast single-GPU cluster.
    inventory = {"TF_VAR_clusters": json.dumps({key: {"instance_type": "1xH100", "orchestrator": "none"}})}

    def ci(mode: str) -> tuple[int, str]:
        result = run_ci(mode, root=root, version=tf_version, backend=backend, mirror=provider_mirror,
                        extra_env=inventory)
        return result.returncode, result.output

    # Plan job: no lock file in the repository, so it is written from the mirror, then init is read-only.
    code, output = ci("plan")
    assert code == 0, output
    assert "locking registry.terraform.io/gpucloud/gpucloud" in output
    assert "terraform init -lockfile=readonly" in output and "Success! The configuration is valid." in output
    assert "changes present" in output and "Plan: 1 to add, 0 to change, 0 to destroy." in output, output
    lock = (root / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/gpucloud/gpucloud"' in lock and '"h1:' in lock
    assert (root / "gpucloud.tfplan").is_file()

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
    # match the lock handed over by the plan job.
    code, output = ci("plan")
    assert code == 0 and "no changes" in output, output
    (root / ".terraform.lock.hcl").write_text(lock.replace('"h1:', '"h1:AAAA', 1))
    code, output = ci("apply")
    mismatch = "doesn't match any of the checksums previously recorded in the dependency lock file"
    assert code == 1 and mismatch in " ".join(output.split()), output


def test_acc_workflows_ci_rejects_unformatted_code(
    backend: Backend, provider_mirror: Path, tmp_path: Path
) -> None:
    root = copy_examples(tmp_path) / "teams" / "vision"
    main = root / "main.tf"
    main.write_text(main.read_text().replace('  team = "vision"', '  team="vision"'))
    result = run_ci("plan", root=root, version="1.11", backend=backend, mirror=provider_mirror)
    assert result.returncode == 1, result.output
    assert "main.tf" in result.output and "files are not formatted" in result.output
    assert "terraform plan" not in result.output  # stopped before planning


def test_acc_workflows_ci_member_key_plans_and_checks_drift_admin_key_applies(
    backend: Backend, provider_mirror: Path, tmp_path: Path
) -> None:
    root = copy_examples(tmp_path) / "teams" / "nlp"
    member = {"GPUCLOUD_API_KEY": member_api_key(backend)}
    admin = {"GPUCLOUD_API_KEY": backend.api_key}

    def ci(mode: str, key: dict[str, str], volume_tib: int = 0) -> tuple[int, str]:
        cluster = {"instance_type": "1xH100", "orchestrator": "none", "volume_size_tib": volume_tib}
        inventory = {"roles": cluster}
        result = run_ci(mode, root=root, version="1.11", backend=backend, mirror=provider_mirror,
                        extra_env={**key, "TF_VAR_clusters": json.dumps(inventory)})
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
