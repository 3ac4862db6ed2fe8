# In a *.tfquery.hcl file: `terraform query` lists the clusters found, and
# `terraform query -generate-config-out=found.tf` writes an import block and a resource block for each.
list "gpucloud_gpu_cluster" "ml" {
  provider = gpucloud
  config {
    region      = "us-east-1"
    name_prefix = "train-"
    labels      = { team = "ml" }
    status      = "RUNNING"
  }
}
