# A volume managed elsewhere (another team's configuration), by name (or set id instead).
data "gpucloud_shared_volume" "shared_datasets" {
  name = "datasets"
}

output "shared_datasets_id" {
  value = data.gpucloud_shared_volume.shared_datasets.id
}
