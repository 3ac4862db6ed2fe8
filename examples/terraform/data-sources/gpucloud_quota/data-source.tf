data "gpucloud_quota" "project" {}

output "gpus_left" {
  # null when the project has no GPU quota
  value = data.gpucloud_quota.project.max_gpus == null ? null : data.gpucloud_quota.project.max_gpus - data.gpucloud_quota.project.gpus_in_use
}
