# `terraform test` for the module, against a real gpucloud backend: the provider is configured from
# GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY. Plan-only runs check the validation blocks; the apply run
# creates a single-node 1xH100 Slurm cluster with a 1 TiB volume and tears it down at the end.

provider "gpucloud" {}

variables {
  team          = "tftest"
  name          = "unit"
  instance_type = "1xH100"
  orchestrator  = "slurm"
}

run "rejects_a_team_that_is_not_a_hostname_prefix" {
  command = plan

  variables {
    team = "NLP_Team"
  }

  expect_failures = [var.team]
}

run "rejects_several_nodes_of_a_single_gpu_shape" {
  command = plan

  variables {
    node_count = 2
  }

  expect_failures = [var.node_count]
}

run "rejects_bare_multi_node_clusters" {
  command = plan

  variables {
    instance_type = "8xH100"
    node_count    = 2
    orchestrator  = "none"
  }

  expect_failures = [var.orchestrator]
}

run "rejects_reserved_billing_without_a_term" {
  command = plan

  variables {
    billing = { type = "reserved" }
  }

  expect_failures = [var.billing]
}

run "plan_shows_the_hourly_cost" {
  command = plan

  variables {
    instance_type = "8xH100"
    node_count    = 2
  }

  assert {
    condition     = abs(output.hourly_cost_usd - 63.84) < 0.0001
    error_message = "2 x 8xH100 on demand should cost 63.84 USD per hour, not ${output.hourly_cost_usd}."
  }

  assert {
    condition     = gpucloud_gpu_cluster.this.name == "tftest-unit"
    error_message = "The cluster name should be <team>-<name>."
  }
}

run "creates_a_single_node_slurm_cluster_with_a_volume" {
  command = apply

  variables {
    volume_size_tib = 1
  }

  assert {
    condition     = startswith(output.login_command, "ssh ")
    error_message = "login_command should be an ssh command line, got ${output.login_command}."
  }

  assert {
    condition     = length(output.nodes) == 1 && output.nodes[0].status == "RUNNING"
    error_message = "The cluster should have one RUNNING node."
  }

  assert {
    condition     = contains(output.slurm.partitions, "gpu") && output.kubernetes == null
    error_message = "A Slurm cluster publishes its partitions and no Kubernetes endpoint."
  }

  assert {
    condition     = abs(output.hourly_cost_usd - (4.29 + 0.1122)) < 0.0001
    error_message = "1xH100 plus 1 TiB should cost 4.4022 USD per hour, not ${output.hourly_cost_usd}."
  }

  assert {
    condition     = gpucloud_gpu_cluster.this.shared_volume_ids == toset([output.volume_id])
    error_message = "The module's volume should be mounted on the cluster."
  }

  assert {
    condition     = gpucloud_gpu_cluster.this.labels["team"] == "tftest"
    error_message = "The cluster should carry the team label."
  }
}
