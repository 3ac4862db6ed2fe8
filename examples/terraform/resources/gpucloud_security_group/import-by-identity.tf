# Terraform 1.12+: import by identity.
import {
  to = gpucloud_security_group.lab
  identity = {
    id = "sgr_01hzy3k3v5mz3c5b6w0x7d9e1f"
  }
}
