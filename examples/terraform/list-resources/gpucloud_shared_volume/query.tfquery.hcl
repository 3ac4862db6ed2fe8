# In a *.tfquery.hcl file: `terraform query` lists the volumes found, and
# `terraform query -generate-config-out=found.tf` writes an import block and a resource block for each.
list "gpucloud_shared_volume" "datasets" {
  provider = gpucloud
  config {
    region      = "us-east-1"
    name_prefix = "datasets-"
  }
}
