import {
  to = gpucloud_host_pool.lab
  identity = {
    id = "hpl_01hzy3m1q8r2t6v9w4x5y7z0ab"
  }
}
