import {
  to = gpucloud_ssh_key.laptop
  identity = {
    id = "ssh_01hzy3k3v5mz3c5b6w0x7d9e1f"
  }
}
