# The admin credentials of a Kubernetes cluster, opened on every run and never written to state, plan or
# disk. Ephemeral values may go to provider blocks, provisioners and other ephemeral contexts only.
data "gpucloud_gpu_cluster" "inference" {
  name = "inference" # made by another root, so its API endpoint is known when this one plans
}

ephemeral "gpucloud_cluster_credentials" "admin" {
  cluster_id = data.gpucloud_gpu_cluster.inference.id
}

# Configure the kubernetes provider in memory: no kubeconfig file is written (examples/terraform/kubernetes
# does the same for the helm provider). Opening Kubernetes credentials needs an admin API key.
provider "kubernetes" {
  host                   = data.gpucloud_gpu_cluster.inference.kubernetes.api_endpoint
  cluster_ca_certificate = data.gpucloud_gpu_cluster.inference.kubernetes.ca_certificate
  token                  = yamldecode(ephemeral.gpucloud_cluster_credentials.admin.kubeconfig).users[0].user.token
}
