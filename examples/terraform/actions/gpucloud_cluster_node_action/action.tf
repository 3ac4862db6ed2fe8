# Terraform 1.14+. Run it by hand:
#   terraform apply -invoke=action.gpucloud_cluster_node_action.reboot_train_1
action "gpucloud_cluster_node_action" "reboot_train_1" {
  config {
    cluster_id = gpucloud_gpu_cluster.train.id
    node       = "train-1"
    action     = "restart" # or replace, drain, resume
    timeout    = "20m"
  }
}

# Or from a resource's lifecycle: here, drain a node whenever the maintenance window changes.
resource "terraform_data" "maintenance" {
  input = var.maintenance_window

  lifecycle {
    action_trigger {
      events  = [after_update]
      actions = [action.gpucloud_cluster_node_action.drain_train_0]
    }
  }
}

action "gpucloud_cluster_node_action" "drain_train_0" {
  config {
    cluster_id = gpucloud_gpu_cluster.train.id
    node       = "train-0"
    action     = "drain"
  }
}
