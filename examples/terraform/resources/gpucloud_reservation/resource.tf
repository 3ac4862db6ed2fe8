# Two 8xH100 nodes for a week, paid up front once (the plan shows upfront_cost_usd, 9116.352 USD at the
# built-in catalog's rates); clusters draw from the block and give the nodes back when they are destroyed
# or replaced, so the term is never forfeited. name and labels change in place.
resource "gpucloud_reservation" "h100_week" {
  name          = "h100 week"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 2
  duration_days = 7
}

resource "gpucloud_gpu_cluster" "train" {
  name           = "train"
  region         = gpucloud_reservation.h100_week.region
  instance_type  = gpucloud_reservation.h100_week.instance_type
  node_count     = 2
  reservation_id = gpucloud_reservation.h100_week.id
}
