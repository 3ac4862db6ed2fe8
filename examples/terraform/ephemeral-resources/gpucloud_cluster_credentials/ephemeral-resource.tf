# The admin kubeconfig of a Kubernetes cluster, opened on every run and never written to state or plan.
# Ephemeral values may go to provider blocks, provisioners and other ephemeral contexts only.
ephemeral "gpucloud_cluster_credentials" "admin" {
  cluster_id = gpucloud_gpu_cluster.inference.id
}

# Write it to a local file (mode 0600) for kubectl.
resource "terraform_data" "kubeconfig" {
  triggers_replace = [gpucloud_gpu_cluster.inference.id]

  provisioner "local-exec" {
    command     = "umask 077 && printf '%s' \"$KUBECONFIG_TEXT\" > kubeconfig.yaml"
    environment = { KUBECONFIG_TEXT = ephemeral.gpucloud_cluster_credentials.admin.kubeconfig }
  }
}
