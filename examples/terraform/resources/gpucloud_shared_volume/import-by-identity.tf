import {
  to = gpucloud_shared_volume.datasets
  identity = {
    id = "vol_01hzy3m1q8r2t6v9w4x5y7z0ab"
  }
}
