# Deploy onto a gpucloud Kubernetes cluster with the kubernetes and helm providers, configured from the
# cluster's ephemeral admin credentials: no kubeconfig file, nothing secret in the plan or the state.
#
# The cluster comes from another root (here the vision team's, examples/terraform/teams/vision), so its
# API endpoint is known when this root plans and the two providers can be configured at plan time.
# This file is the gpucloud half; kubernetes.tf hands the values to the providers.

terraform {
  required_version = ">= 1.11" # ephemeral values in provider blocks: 1.10+

  required_providers {
    gpucloud = {
      source  = "gpucloud/gpucloud"
      version = "~> 0.1"
    }
  }
}

provider "gpucloud" {} # GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY (an admin key: see README.md)

variable "cluster_name" {
  description = "Name of an existing Kubernetes cluster of the project."
  type        = string
  default     = "vision-detector"
}

data "gpucloud_gpu_cluster" "this" {
  name = var.cluster_name

  lifecycle {
    postcondition {
      condition     = self.orchestrator == "kubernetes"
      error_message = "Cluster ${var.cluster_name} runs ${self.orchestrator}, not kubernetes: pick a Kubernetes cluster."
    }
  }
}

# Opened on every plan and apply, closed at the end of the run; never written anywhere.
ephemeral "gpucloud_cluster_credentials" "admin" {
  cluster_id = data.gpucloud_gpu_cluster.this.id
}

locals {
  # What the kubernetes and helm providers need. The token comes from the admin kubeconfig, parsed in
  # memory; a local built from an ephemeral value is itself ephemeral, so it may only feed provider
  # blocks and other ephemeral contexts.
  kubernetes = {
    host                   = data.gpucloud_gpu_cluster.this.kubernetes.api_endpoint
    cluster_ca_certificate = data.gpucloud_gpu_cluster.this.kubernetes.ca_certificate
    token                  = yamldecode(ephemeral.gpucloud_cluster_credentials.admin.kubeconfig).users[0].user.token
  }
}

output "api_endpoint" {
  description = "The cluster's Kubernetes API (not secret: the credentials stay ephemeral)."
  value       = data.gpucloud_gpu_cluster.this.kubernetes.api_endpoint
}
