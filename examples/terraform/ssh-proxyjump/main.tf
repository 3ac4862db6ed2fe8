# Reach every node of a multi-node cluster over SSH. Only the cluster's login host (its jumphost) has a
# public address; the nodes sit on the cluster's private subnet, reached through the jumphost with
# OpenSSH's ProxyJump. The outputs are an ~/.ssh/config block and one `ssh -J` command per node:
#
#   terraform apply   # reads the cluster; creates nothing
#   terraform output -raw ssh_config > ~/.ssh/config.d/quickstart   # `Include config.d/*` in ~/.ssh/config
#   ssh quickstart-1                                                # any node by name, through the jumphost
#
# (A single-node cluster has no jumphost: its login host is the node itself, `login.ssh_command`.)

terraform {
  required_version = ">= 1.11"

  required_providers {
    gpucloud = {
      source  = "gpucloud/gpucloud"
      version = "~> 0.1"
    }
  }
}

provider "gpucloud" {} # GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY (a member key is enough: this only reads)

variable "cluster_name" {
  description = "Name of an existing multi-node cluster of the project."
  type        = string
  default     = "quickstart" # the 2-node Slurm cluster of examples/terraform/quickstart
}

data "gpucloud_gpu_cluster" "this" {
  name = var.cluster_name
}

locals {
  login = data.gpucloud_gpu_cluster.this.login
  jump  = "${var.cluster_name}-jumphost"
}

output "ssh_config" {
  description = "An OpenSSH client configuration: the jumphost, then every node through it."
  value = join("\n", concat(
    [
      "Host ${local.jump}",
      "  HostName ${local.login.host}",
      "  Port ${local.login.port}",
      "  User ${local.login.user}",
    ],
    flatten([for node in data.gpucloud_gpu_cluster.this.nodes : [
      "",
      "Host ${node.name}",
      "  HostName ${node.private_ip}",
      "  User ${local.login.user}",
      "  ProxyJump ${local.jump}",
    ]]),
    [""],
  ))
}

output "node_ssh_commands" {
  description = "One ssh command per node, through the jumphost (no SSH configuration needed)."
  value = {
    for node in data.gpucloud_gpu_cluster.this.nodes :
    node.name => "ssh -J ${local.login.user}@${local.login.host}:${local.login.port} ${local.login.user}@${node.private_ip}"
  }
}
