import {
  to = gpucloud_reserved_ip.login
  identity = {
    id = "rip_01hzy3m1q8r2t6v9w4x5y7z0ab"
  }
}
