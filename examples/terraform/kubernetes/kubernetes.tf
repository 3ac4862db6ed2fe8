# The kubernetes and helm providers, configured from local.kubernetes (main.tf). Both accept ephemeral
# values in their provider blocks; Terraform re-opens the credentials whenever it configures them.

terraform {
  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.36"
    }
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.0" # 3.x: `kubernetes` is an attribute (2.x had a block)
    }
  }
}

provider "kubernetes" {
  host                   = local.kubernetes.host
  cluster_ca_certificate = local.kubernetes.cluster_ca_certificate
  token                  = local.kubernetes.token
}

provider "helm" {
  kubernetes = {
    host                   = local.kubernetes.host
    cluster_ca_certificate = local.kubernetes.cluster_ca_certificate
    token                  = local.kubernetes.token
  }
}

resource "kubernetes_namespace" "monitoring" {
  metadata {
    name = "gpu-monitoring"
  }
}

# GPU metrics (DCGM) from every node, for Prometheus to scrape.
resource "helm_release" "dcgm_exporter" {
  name       = "dcgm-exporter"
  namespace  = kubernetes_namespace.monitoring.metadata[0].name
  repository = "https://nvidia.github.io/dcgm-exporter/helm-charts"
  chart      = "dcgm-exporter"
}
