"""Sharing the gpu-training-cluster module across teams, against the real backend: the module's own
`terraform test` (a smoke test, on Terraform 1.11 and 1.15), and with Terraform 1.11 the NLP and vision
team roots applied into one project with a scoped key each, neither seeing the other, and one
module's outputs feeding another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import PROVIDER_BLOCK
from acceptance.harness import Terraform
from acceptance.workflow_steps import cluster_named, copy_examples, gone, new_api_key, state_values


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def runner(mirror: Path, backend: Backend, directory: Path, api_key: str | None = None) -> Terraform:
    """A Terraform 1.11 runner (provider from the mirror, reaching the backend) working in `directory`,
    with `api_key` instead of the backend's unscoped admin key when given."""
    env = {**backend.provider_env, **({"GPUCLOUD_API_KEY": api_key} if api_key else {})}
    return Terraform(directory, version="1.11", mirror=mirror, env=env)


def test_acc_workflows_module_terraform_test(
    tf_version: str, provider_mirror: Path, backend: Backend, tmp_path: Path
) -> None:
    module = copy_examples(tmp_path) / "modules" / "gpu-training-cluster"
    tf = Terraform(module, version=tf_version, mirror=provider_mirror, env=backend.provider_env)
    tf.init()
    result = tf.run("test", check=False)
    output = " ".join(result.output.split())
    assert result.returncode == 0, result.output
    assert "Success! 6 passed, 0 failed." in output, result.output
    # terraform test destroys what its apply runs created.
    assert gone(backend, "tftest-unit")


def test_acc_workflows_team_roots_share_one_project(
    provider_mirror: Path, backend: Backend, tmp_path: Path
) -> None:
    teams = copy_examples(tmp_path) / "teams"
    # Each root runs with its team's scoped key, as docs/guides/modules.md sets them up.
    keys = {team: new_api_key(backend, "admin", "--scope", f"team={team}") for team in ("nlp", "vision")}
    nlp, vision = (runner(provider_mirror, backend, teams / team, keys[team]) for team in ("nlp", "vision"))
    for tf in (nlp, vision):
        tf.init()
        tf.apply()
    # Each root's plan is still empty once the other team applied: nothing of one shows in the other.
    for tf in (nlp, vision):
        tf.assert_plan_empty()
    # The NLP key cannot see the vision team's cluster: a data source naming it fails at plan time.
    nlp.write("other_team.tf", """
        data "gpucloud_gpu_cluster" "other" {
          name = "vision-detector"
        }
    """)
    lookup = nlp.run("plan", check=False)
    text = " ".join(lookup.output.split())
    assert lookup.returncode == 1 and "Cluster Not Found" in text, lookup.output
    assert 'No GPU cluster named "vision-detector"' in text, lookup.output
    nlp.remove("other_team.tf")

    names = {c["name"]: c for c in backend.client.list_clusters()}
    assert {"nlp-pretrain", "nlp-eval", "vision-detector", "vision-labeling"} <= set(names)
    pretrain, detector = names["nlp-pretrain"], names["vision-detector"]
    assert (pretrain["orchestrator"], pretrain["node_count"]) == ("slurm", 2)
    assert pretrain["labels"]["team"] == "nlp"
    assert (detector["orchestrator"], detector["labels"]["team"]) == ("kubernetes", "vision")
    assert len(pretrain["volume_ids"]) == 1 and pretrain["volume_ids"] != detector["volume_ids"]

    outputs = nlp.output_json()
    assert set(outputs["login_commands"]["value"]) == {"pretrain", "eval"}
    assert outputs["slurm_partitions"]["value"] == {"pretrain": ["gpu"]}
    # 2 x 8 x 3.99 (pretrain) + 2 TiB x 0.1122 + 1 x 4.29 (eval)
    assert abs(outputs["hourly_cost_usd"]["value"] - (63.84 + 0.2244 + 4.29)) < 1e-6
    vision_out = vision.output_json()
    assert set(vision_out["kubernetes_endpoints"]["value"]) == {"detector", "labeling"}

    # Tearing the vision team down leaves the NLP team's clusters as they were.
    vision.destroy()
    assert gone(backend, "vision-detector") and gone(backend, "vision-labeling")
    still = cluster_named(backend, "nlp-pretrain")
    assert still is not None and (still["id"], still["status"]) == (pretrain["id"], "RUNNING")
    nlp.assert_plan_empty()
    assert set(state_values(nlp)) >= {'module.cluster["pretrain"].gpucloud_gpu_cluster.this',
                                      'module.cluster["eval"].gpucloud_gpu_cluster.this'}


def test_acc_workflows_module_outputs_feed_another_module(
    provider_mirror: Path, backend: Backend, tmp_path: Path
) -> None:
    modules = copy_examples(tmp_path) / "modules"
    tf = runner(provider_mirror, backend, tmp_path / "root")
    tf.write("provider.tf", PROVIDER_BLOCK)
    tf.write_main(f"""
    # The evaluation cluster mounts the training cluster's checkpoint volume.
    module "train" {{
      source          = "{modules}/gpu-training-cluster"
      team            = "feed"
      name            = "train"
      instance_type   = "1xH100"
      volume_size_tib = 1
    }}

    module "eval" {{
      source           = "{modules}/gpu-training-cluster"
      team             = "feed"
      name             = "eval"
      instance_type    = "1xH100"
      orchestrator     = "none"
      extra_volume_ids = [module.train.volume_id]
    }}

    output "eval_mounts" {{
      value = module.eval.cluster_id
    }}
    """)
    tf.init()
    tf.apply()
    tf.assert_plan_empty()
    train, evaluation = cluster_named(backend, "feed-train"), cluster_named(backend, "feed-eval")
    assert train is not None and evaluation is not None
    assert evaluation["volume_ids"] == train["volume_ids"] and len(train["volume_ids"]) == 1
    volume = backend.client.get_volume(train["volume_ids"][0])
    assert sorted(volume["attached_cluster_ids"]) == sorted([train["id"], evaluation["id"]])
    tf.destroy()
    assert gone(backend, "feed-train") and gone(backend, "feed-eval")
