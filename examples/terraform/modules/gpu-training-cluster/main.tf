# A training cluster for one team: the cluster, optionally a shared volume mounted on every node, and
# labels that say who owns what. Several teams can call this module into one project: every name is
# prefixed with the team, so their clusters never collide.

locals {
  cluster_name = "${var.team}-${var.name}"
  labels = merge(var.labels, {
    team         = var.team
    "managed-by" = "terraform"
    module       = "gpu-training-cluster"
  })
  volume_ids = setunion(gpucloud_shared_volume.data[*].id, var.extra_volume_ids)
}

resource "gpucloud_shared_volume" "data" {
  count = var.volume_size_tib > 0 ? 1 : 0

  name     = "${local.cluster_name}-data"
  region   = var.region
  size_tib = var.volume_size_tib
}

resource "gpucloud_gpu_cluster" "this" {
  name                = local.cluster_name
  region              = var.region
  instance_type       = var.instance_type
  node_count          = var.node_count
  orchestrator        = var.orchestrator
  billing             = var.billing
  labels              = local.labels
  max_hourly_cost_usd = var.max_hourly_cost_usd

  # null rather than an empty set: "no keys / no volumes" then reads back the same way.
  ssh_key_ids       = length(var.ssh_key_ids) > 0 ? var.ssh_key_ids : null
  shared_volume_ids = length(local.volume_ids) > 0 ? local.volume_ids : null
}
