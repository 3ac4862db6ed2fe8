# A Slurm cluster on servers you already have: a host pool of them, and a cluster whose nodes are those
# servers (docs/guides/own-hosts.md). No compute charge: the plan shows estimated_hourly_cost_usd = 0.
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

resource "gpucloud_host_pool" "lab" {
  name     = "lab"
  region   = var.region
  hosts    = var.hosts
  ssh_user = var.ssh_user

  # Write-only: sent to the API, never in plan or state. Bump the version to send a new key.
  ssh_private_key_wo         = file(pathexpand(var.pool_private_key_file))
  ssh_private_key_wo_version = 1
}

resource "gpucloud_ssh_key" "me" {
  name       = "own-hosts"
  public_key = file(pathexpand(var.ssh_public_key_file))
}

resource "gpucloud_gpu_cluster" "own" {
  name         = "own"
  node_count   = var.node_count # takes or gives back servers of the pool in place
  host_pool_id = gpucloud_host_pool.lab.id
  # region: the pool's. instance_type: the catalog's type of the servers' GPUs (8 H200s make 8xH200),
  # known after the first apply. orchestrator: slurm, the only one on a host pool (and its default there).

  ssh_key_ids = [gpucloud_ssh_key.me.id]

  lifecycle {
    # The backend checks a new pool's servers seconds after it is registered: a first apply that
    # registers the pool stops here until enough are ready (ready_hosts counts those the cluster holds;
    # the plan itself checks that enough are free).
    precondition {
      condition     = gpucloud_host_pool.lab.ready_hosts >= var.node_count
      error_message = "Host pool lab has fewer ready servers than node_count (servers_not_ready says why). Run `gpucloud host-pool probe lab --wait`, then apply again."
    }
  }
}

output "login" {
  description = "The first server is the login node and runs slurmctld: `gpucloud ssh own` logs in there."
  value       = gpucloud_gpu_cluster.own.login.ssh_command
}

output "nodes" {
  description = "Each node and the server it runs on."
  value       = { for node in gpucloud_gpu_cluster.own.nodes : node.name => node.private_ip }
}

output "servers_not_ready" {
  value = [for h in gpucloud_host_pool.lab.host_status : "${h.address}: ${h.reason}" if h.status != "ready"]
}
