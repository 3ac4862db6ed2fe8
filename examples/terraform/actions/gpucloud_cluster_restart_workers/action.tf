# Terraform 1.14+: restart every worker reporting XID errors and wait until they run again.
#   terraform apply -invoke=action.gpucloud_cluster_restart_workers.train
action "gpucloud_cluster_restart_workers" "train" {
  config {
    cluster_id = gpucloud_gpu_cluster.train.id
  }
}
