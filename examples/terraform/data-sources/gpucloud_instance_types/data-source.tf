# 8-GPU H100 nodes in us-east-1, with their prices and the capacity free right now.
data "gpucloud_instance_types" "h100" {
  region   = "us-east-1"
  gpu      = "h100"
  min_gpus = 8
}

output "h100_prices" {
  value = {
    for t in data.gpucloud_instance_types.h100.instance_types :
    t.name => { usd_per_gpu_hour = t.on_demand_usd_per_gpu_hour, available_nodes = t.available_nodes }
  }
}
