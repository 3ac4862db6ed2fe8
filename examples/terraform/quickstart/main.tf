# Quickstart: the provider configured from the environment (GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY).
# The gpucloud resources (SSH key, shared volume, 2-node Slurm cluster) arrive with issue 6.
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
