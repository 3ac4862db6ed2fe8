# Import a reserved IP by its id (POST /v1/clusters/{id}/reserve-ip returns one for a cluster's address).
terraform import gpucloud_reserved_ip.login rip_01hzy3m1q8r2t6v9w4x5y7z0ab
