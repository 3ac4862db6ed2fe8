output "cluster_id" {
  description = "Id of the cluster."
  value       = gpucloud_gpu_cluster.this.id
}

output "cluster_name" {
  description = "Name of the cluster (`<team>-<name>`)."
  value       = gpucloud_gpu_cluster.this.name
}

output "login_command" {
  description = "SSH command to the login node (the jumphost of a multi-node cluster)."
  value       = gpucloud_gpu_cluster.this.login.ssh_command
}

output "nodes" {
  description = "The nodes: name, role, status, addresses and place in the fabric."
  value = [
    for node in gpucloud_gpu_cluster.this.nodes : {
      name          = node.name
      role          = node.role
      status        = node.status
      private_ip    = node.private_ip
      public_ip     = node.public_ip
      topology_path = node.topology_path
    }
  ]
}

output "orchestrator" {
  description = "slurm, kubernetes or none."
  value       = gpucloud_gpu_cluster.this.orchestrator
}

output "slurm" {
  description = "Slurm controller and partitions (null unless orchestrator is slurm)."
  value       = gpucloud_gpu_cluster.this.slurm
}

output "kubernetes" {
  description = "Kubernetes API endpoint and CA (null unless orchestrator is kubernetes). Credentials come from the gpucloud_cluster_credentials ephemeral resource."
  value       = gpucloud_gpu_cluster.this.kubernetes
}

output "nccl_env" {
  description = "NCCL environment tuned for the cluster's interconnect."
  value       = gpucloud_gpu_cluster.this.nccl_env
}

output "volume_id" {
  description = "Id of the module's shared volume (null when volume_size_tib is 0); another cluster can mount it."
  value       = one(gpucloud_shared_volume.data[*].id)
}

output "volume_mount_path" {
  description = "Where the module's shared volume is mounted on every node (null without a volume)."
  value       = one(gpucloud_shared_volume.data[*].mount_path)
}

output "hourly_cost_usd" {
  description = "Hourly cost in USD of the cluster plus its volume, from the catalog (known at plan time)."
  value = (
    gpucloud_gpu_cluster.this.estimated_hourly_cost_usd
    + sum(concat([0], gpucloud_shared_volume.data[*].estimated_hourly_cost_usd))
  )
}
