# In a *.tfquery.hcl file: `terraform query` lists the keys found, and
# `terraform query -generate-config-out=found.tf` writes an import block and a resource block for each.
list "gpucloud_ssh_key" "team" {
  provider = gpucloud
  config {
    name_prefix = "team-"
  }
}
