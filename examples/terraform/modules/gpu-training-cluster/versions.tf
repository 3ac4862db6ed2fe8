terraform {
  # Cross-variable validation (node_count vs instance_type) needs Terraform 1.9 or later.
  required_version = ">= 1.11"

  required_providers {
    gpucloud = {
      # Installed from your backend's network mirror, named by a CLI configuration: docs/installing.md.
      source  = "gpucloud/gpucloud"
      version = ">= 0.1"
    }
  }
}
