# The NLP team's clusters: one root module (one state) per team, all in the same gpucloud project.
# Every cluster comes from the shared gpu-training-cluster module; the map below is the team's
# inventory, so adding a cluster is adding an entry. Provider settings come from the environment
# (GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY), so CI and laptops use the same code.
#
# GPUCLOUD_API_KEY is the NLP team's scoped key, made once by a project admin:
#   gpucloud-backend create-api-key --project ml --role admin --scope team=nlp
# With it this root sees and changes only resources labelled team = "nlp" (the module sets the label):
# the vision team's clusters, volumes and SSH keys answer "not found" here.

terraform {
  required_version = ">= 1.11"

  required_providers {
    gpucloud = {
      source  = "gpucloud/gpucloud"
      version = "~> 0.1"
    }
  }
}

provider "gpucloud" {}

locals {
  team = "nlp"
}

variable "clusters" {
  description = "The team's clusters by name."
  type = map(object({
    region          = optional(string, "us-east-1")
    instance_type   = optional(string, "8xH100")
    node_count      = optional(number, 1)
    orchestrator    = optional(string, "slurm")
    volume_size_tib = optional(number, 0)
  }))
  default = {
    # Pre-training: two 8xH100 nodes on InfiniBand under Slurm, with a dataset volume.
    pretrain = { node_count = 2, volume_size_tib = 2 }
    # Evaluation and notebooks: one GPU, no scheduler.
    eval = { instance_type = "1xH100", orchestrator = "none" }
  }
}

module "cluster" {
  source   = "../../modules/gpu-training-cluster"
  for_each = var.clusters

  team            = local.team
  name            = each.key
  region          = each.value.region
  instance_type   = each.value.instance_type
  node_count      = each.value.node_count
  orchestrator    = each.value.orchestrator
  volume_size_tib = each.value.volume_size_tib
  labels          = { "cost-center" = "research-nlp" }
}

output "login_commands" {
  description = "SSH command of each cluster."
  value       = { for name, cluster in module.cluster : name => cluster.login_command }
}

output "slurm_partitions" {
  description = "Slurm partitions of each Slurm cluster."
  value       = { for name, cluster in module.cluster : name => cluster.slurm.partitions if cluster.slurm != null }
}

output "hourly_cost_usd" {
  description = "What the team's clusters and volumes cost per hour."
  value       = sum(concat([0], [for cluster in module.cluster : cluster.hourly_cost_usd]))
}
