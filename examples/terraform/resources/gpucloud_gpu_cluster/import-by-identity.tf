import {
  to = gpucloud_gpu_cluster.training
  identity = {
    id = "cls_01hzy3m1q8r2t6v9w4x5y7z0ab"
  }
}
