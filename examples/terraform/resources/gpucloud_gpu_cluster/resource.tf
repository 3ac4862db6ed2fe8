# A 2-node Slurm cluster of 8xH100 nodes on InfiniBand (orchestrator and interconnect default from the
# node count and the instance type), with a shared volume and an SSH key. `terraform plan` shows the
# hourly cost before anything is created.
resource "gpucloud_gpu_cluster" "training" {
  name          = "training"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 2 # scales in place; the plan checks the region has the capacity

  ssh_key_ids       = [gpucloud_ssh_key.me.id]
  shared_volume_ids = [gpucloud_shared_volume.datasets.id] # attached and detached in place

  labels = {
    team = "research"
  }

  # Refuse a create or a change that would raise the cost above this per hour.
  max_hourly_cost_usd = 100

  timeouts {
    create = "2h"
  }
}

# A single node running a PyTorch container, reserved for 30 days at the reserved rate.
resource "gpucloud_gpu_cluster" "notebook" {
  name          = "notebook"
  region        = "us-east-1"
  instance_type = "1xH100"
  container     = "pytorch"

  billing = {
    type          = "reserved"
    duration_days = 30
    on_expiry     = "convert_to_on_demand" # the only billing setting that changes in place
  }
}

# Two of your own servers with 8 H200s each, from a gpucloud_host_pool (docs/guides/own-hosts.md): Slurm
# (the only orchestrator on a pool), the first server the login node, no compute charge.
resource "gpucloud_gpu_cluster" "own" {
  name          = "own"
  region        = gpucloud_host_pool.lab.region
  instance_type = "8xH200" # the servers' GPUs
  node_count    = 2        # takes or gives back servers of the pool in place
  host_pool_id  = gpucloud_host_pool.lab.id
  ssh_key_ids   = [gpucloud_ssh_key.me.id]
}

output "training_login" {
  value = gpucloud_gpu_cluster.training.login.ssh_command
}

output "training_nccl_env" {
  value = gpucloud_gpu_cluster.training.nccl_env
}
