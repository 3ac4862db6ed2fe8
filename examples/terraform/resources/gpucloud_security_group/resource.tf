# SSH from the office only, Jupyter from the VPN, all traffic out. Traffic between a cluster's own nodes
# (Slurm, NCCL) is always allowed and needs no rule.
resource "gpucloud_security_group" "lab" {
  name        = "lab"
  description = "SSH from the office, Jupyter from the VPN"

  ingress = [
    { protocol = "tcp", from_port = 22, cidr_blocks = ["203.0.113.0/24"], description = "SSH, office" },
    { protocol = "tcp", from_port = 8888, to_port = 8890, cidr_blocks = ["10.8.0.0/16"] },
    { protocol = "icmp", cidr_blocks = ["0.0.0.0/0"] },
  ]
  egress = [
    { protocol = "all", cidr_blocks = ["0.0.0.0/0", "::/0"] },
  ]
}

# A cluster names its groups; changing them (or their rules) reconfigures its nodes in place.
resource "gpucloud_gpu_cluster" "lab" {
  name               = "lab"
  region             = "us-east-1"
  instance_type      = "8xH100"
  node_count         = 2
  security_group_ids = [gpucloud_security_group.lab.id]
}
