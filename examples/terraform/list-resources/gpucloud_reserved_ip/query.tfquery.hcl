# In a *.tfquery.hcl file: `terraform query` lists the reserved IPs found (for example those made by
# POST /v1/clusters/{id}/reserve-ip), and `terraform query -generate-config-out=found.tf` writes an
# import block and a resource block for each.
list "gpucloud_reserved_ip" "login" {
  provider = gpucloud
  config {
    region = "us-east-1"
    labels = { team = "nlp" }
  }
}
