# Container images on a 2-node Slurm cluster: a public image and one from a private registry, each
# imported once onto the cluster's shared storage and read-only at /images/<name> on every node.
# Run a job in one with `srun --container=/images/<name> CMD` (docs/guides/containers.md).
# The provider reads GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY from the environment.
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

variable "registry_password" {
  description = "Password or token for registry.internal:5000 (e.g. TF_VAR_registry_password). Stored sealed by the API, never returned."
  type        = string
  sensitive   = true
}

resource "gpucloud_gpu_cluster" "train" {
  name          = "containers"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 2 # Slurm by default: images run through srun --container

  container_images = {
    torch = "nvcr.io/nvidia/pytorch:24.05-py3"
    train = "registry.internal:5000/team/train:v3" # change the tag and apply: updated in place
  }

  registry_credentials = {
    "registry.internal:5000" = { username = "ci", password = var.registry_password }
  }
}

output "images" {
  description = "Each image's state, digest and size on the cluster's shared storage."
  value       = { for i in gpucloud_gpu_cluster.train.images : i.name => "${i.state} ${coalesce(i.digest, "-")}" }
}

output "run" {
  description = "How to run a command in the train image on both nodes."
  value       = "gpucloud ssh ${gpucloud_gpu_cluster.train.name} -- srun -N2 --container=/images/train cat /etc/os-release"
}
