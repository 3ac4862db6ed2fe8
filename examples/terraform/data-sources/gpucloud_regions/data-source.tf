data "gpucloud_regions" "all" {}

output "regions_with_infiniband" {
  value = [for r in data.gpucloud_regions.all.regions : r.name if contains(r.interconnects, "infiniband")]
}
