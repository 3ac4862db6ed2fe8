# Servers of your own, reached over SSH. Put the pool's ssh_public_key into each host's authorized_keys.
resource "gpucloud_host_pool" "lab" {
  name   = "lab"
  region = "on-prem-berlin"
  hosts = [
    { address = "10.0.0.5" },
    { address = "10.0.0.6" },
    { address = "gpu-c.lab.example", port = 2222 },
  ]
  ssh_user   = "ubuntu" # needs passwordless sudo
  proxy_jump = "jump@bastion.lab.example"

  # Write-only (Terraform 1.11+): sent to the API, never stored in plan or state.
  # Bump the version to send a new key.
  ssh_private_key_wo         = file("~/.ssh/gpucloud_pool")
  ssh_private_key_wo_version = 1

  shared_storage_path = "/mnt/shared"
  install_packages    = true
  labels              = { team = "nlp" }
}

output "authorized_key" {
  value = gpucloud_host_pool.lab.ssh_public_key
}

# What the last read saw: `terraform refresh` (or any plan) updates it.
output "hosts_not_ready" {
  value = [for h in gpucloud_host_pool.lab.host_status : "${h.address}: ${h.reason}" if h.status != "ready"]
}
