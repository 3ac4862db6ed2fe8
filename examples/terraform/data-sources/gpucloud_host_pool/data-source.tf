# A pool registered outside this configuration, by name (or set id instead).
data "gpucloud_host_pool" "lab" {
  name = "lab"
}

output "lab_gpus" {
  value = sum(concat([0], [for h in data.gpucloud_host_pool.lab.host_status : coalesce(h.gpu_count, 0)]))
}
