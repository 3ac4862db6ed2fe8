# Read a cluster created elsewhere (another workspace, the console) by name, or by id.
data "gpucloud_gpu_cluster" "shared" {
  name = "training"
}

output "shared_slurm_controller" {
  value = data.gpucloud_gpu_cluster.shared.slurm.controller
}

output "shared_nodes" {
  value = { for node in data.gpucloud_gpu_cluster.shared.nodes : node.name => node.private_ip }
}
