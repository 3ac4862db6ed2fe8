# Quickstart: an SSH key, a shared volume and a 2-node Slurm cluster of 8xH100 nodes on InfiniBand.
# The provider reads GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY from the environment (`make demo` sets them).
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

variable "ssh_public_key" {
  description = "Public key allowed to log in. Default: ~/.ssh/id_ed25519.pub or ~/.ssh/id_rsa.pub, else a demo key."
  type        = string
  default     = null
}

locals {
  # A throwaway key (its private half was never kept): the cluster still comes up without yours.
  demo_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICN36KyRyAeSVuP11JYQZluGWXJKqRuUk3NB7TBqsWx9 gpucloud-quickstart"
  public_key = coalesce(
    var.ssh_public_key,
    try(file(pathexpand("~/.ssh/id_ed25519.pub")), null),
    try(file(pathexpand("~/.ssh/id_rsa.pub")), null),
    local.demo_public_key,
  )
}

resource "gpucloud_ssh_key" "me" {
  name       = "quickstart"
  public_key = local.public_key
}

resource "gpucloud_shared_volume" "data" {
  name     = "quickstart-data"
  region   = "us-east-1"
  size_tib = 1
}

resource "gpucloud_gpu_cluster" "slurm" {
  name          = "quickstart"
  region        = "us-east-1"
  instance_type = "8xH100" # 8 H100 GPUs per node, one NDR 400 InfiniBand HCA per GPU
  node_count    = 2        # more than one node: Slurm by default, on the region's InfiniBand fabric

  ssh_key_ids       = [gpucloud_ssh_key.me.id]
  shared_volume_ids = [gpucloud_shared_volume.data.id]

  labels = {
    example = "quickstart"
  }
}

output "ssh_command" {
  description = "Log in to the jumphost (Slurm's login node)."
  value       = gpucloud_gpu_cluster.slurm.login.ssh_command
}

output "nodes" {
  description = "Each node with its private address and InfiniBand partition key."
  value = {
    for node in gpucloud_gpu_cluster.slurm.nodes :
    node.name => "${node.private_ip} (${node.status}, P_Key ${node.partition_key})"
  }
}

output "slurm_partition" {
  value = one(gpucloud_gpu_cluster.slurm.slurm.partitions)
}

output "hourly_cost_usd" {
  description = "What the cluster costs per hour while it runs (shared volume billed separately)."
  value       = gpucloud_gpu_cluster.slurm.estimated_hourly_cost_usd
}
