# A key registered outside this configuration, by name (or set id instead).
data "gpucloud_ssh_key" "ops" {
  name = "ops-team"
}

output "ops_key_id" {
  value = data.gpucloud_ssh_key.ops.id
}
