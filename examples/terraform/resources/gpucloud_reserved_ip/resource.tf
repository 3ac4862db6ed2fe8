# An address that outlives clusters: DNS records and firewall allowlists keep pointing at it.
resource "gpucloud_reserved_ip" "login" {
  region = "us-east-1"
  name   = "train-login"
  labels = { team = "nlp" }
}

resource "gpucloud_gpu_cluster" "train" {
  name          = "train"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 2
  # The login node answers on the reserved IP. Point another cluster at it to move it there in place;
  # remove the line to give this cluster a floating address again (the IP stays reserved).
  reserved_ip_id = gpucloud_reserved_ip.login.id
}

output "ssh" {
  value = gpucloud_gpu_cluster.train.login.ssh_command
}
