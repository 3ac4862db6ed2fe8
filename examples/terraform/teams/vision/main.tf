# The vision team's clusters: its own root module and state, in the same gpucloud project as the
# NLP team. Names are prefixed with the team by the shared module, so the two never collide.
# Provider settings come from the environment (GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY).
#
# GPUCLOUD_API_KEY is the vision team's scoped key, made once by a project admin:
#   gpucloud-backend create-api-key --project ml --role admin --scope team=vision
# With it this root sees and changes only resources labelled team = "vision" (the module sets the
# label): the NLP team's clusters, volumes and SSH keys answer "not found" here.

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
  team = "vision"
}

variable "clusters" {
  description = "The team's clusters by name."
  type = map(object({
    region          = optional(string, "us-east-1")
    instance_type   = optional(string, "8xH100")
    node_count      = optional(number, 1)
    orchestrator    = optional(string, "kubernetes")
    volume_size_tib = optional(number, 0)
  }))
  default = {
    # Detector training on Kubernetes: two 8xH100 nodes on InfiniBand with an image volume.
    detector = { node_count = 2, volume_size_tib = 1 }
    # Labelling tools: one GPU, still on Kubernetes so the same manifests deploy there.
    labeling = { instance_type = "1xH100" }
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
  labels          = { "cost-center" = "research-vision" }
}

output "login_commands" {
  description = "SSH command of each cluster."
  value       = { for name, cluster in module.cluster : name => cluster.login_command }
}

output "kubernetes_endpoints" {
  description = "Kubernetes API endpoint of each Kubernetes cluster."
  value       = { for name, cluster in module.cluster : name => cluster.kubernetes.api_endpoint if cluster.kubernetes != null }
}

output "hourly_cost_usd" {
  description = "What the team's clusters and volumes cost per hour."
  value       = sum(concat([0], [for cluster in module.cluster : cluster.hourly_cost_usd]))
}
