# Import a GPU cluster by its id.
terraform import gpucloud_gpu_cluster.training cls_01hzy3m1q8r2t6v9w4x5y7z0ab
