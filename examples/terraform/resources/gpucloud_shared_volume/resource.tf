resource "gpucloud_shared_volume" "datasets" {
  name   = "datasets"
  region = "us-east-1"
  # Grows in place; a smaller value is rejected at plan time (shrinking would lose data).
  size_tib = 10
}

output "datasets_mount_path" {
  value = gpucloud_shared_volume.datasets.mount_path
}

output "datasets_hourly_cost_usd" {
  value = gpucloud_shared_volume.datasets.estimated_hourly_cost_usd
}
